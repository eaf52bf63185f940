package soak

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// deleteLinger is how long after a failed Delete returned it may still
// reach Redis (a command abandoned at the client's timeout can still be
// executed by the server).
const deleteLinger = 2 * time.Second

// events are the things that allow one more load of a key than one per
// refresh (invariant 1), in a span of time.
type events struct {
	deletes, outages, takeovers, degraded int
}

func (e events) total() int { return e.deletes + e.outages + e.takeovers + e.degraded }

func (e events) String() string {
	return fmt.Sprintf("%d deletes, %d Redis restarts, %d takeovers, %d degraded workers",
		e.deletes, e.outages, e.takeovers, e.degraded)
}

// eventsNear counts the events that touch key in [from, to]:
//   - a Delete of key running in it: the entry and the lease are gone, the
//     next caller loads at once. A Delete that failed may have reached Redis
//     up to deleteLinger after it returned, so it counts too.
//   - a Redis restart (down, up) overlapping it: leases and entries are
//     gone.
//   - a takeover: a worker killed in [from - 2 LeaseTTL, to] that had
//     started a load of key in the 2s before it died, which may have held a
//     lease and never committed; the lease expires and another worker loads.
//     Or, at the end, a worker that closed its Cache while loading key
//     (Load.Cut after Records.Stopped): Close cancelled the load and handed
//     its lease back to a worker still running.
//   - a degraded worker: a merged Interval of one worker overlapping it, if
//     that worker loaded key in it or in the troubleLead before it. A
//     worker in Redis trouble may fail to commit a load of the key (its
//     lease is released or expires and another worker loads), or lose its
//     lease while loading it (a stall longer than LeaseTTL); a worker that
//     was not loading the key cannot cause another load of it.
func (ix *index) eventsNear(key int, from, to time.Duration) events {
	var e events
	for _, d := range ix.deletes[key] {
		end := d.End
		if d.Err != "" {
			end += deleteLinger
		}
		if d.Start <= to && end >= from {
			e.deletes++
		}
	}
	for _, o := range ix.r.Outages {
		if o.Down <= to && o.Up >= from {
			e.outages++
		}
	}
	for _, at := range ix.takeover[key] {
		if at >= from-2*LeaseTTL && at <= to {
			e.takeovers++
		}
	}
	for w, ivs := range ix.degraded {
		for _, iv := range ivs {
			if iv.From <= to && iv.To >= from && ix.loadedIn(w, key, iv.From-troubleLead, iv.To) {
				e.degraded++
			}
		}
	}
	return e
}

// troubleLead is how long before a worker saw Redis trouble a load of its
// may have started whose commit the trouble undid: the load's duration and
// the failed call's RedisTimeout, with a wide margin for a stalled machine.
const troubleLead = 5 * time.Second

// loadedIn reports whether worker started a load of key in [from, to].
func (ix *index) loadedIn(worker, key int, from, to time.Duration) bool {
	starts := ix.starts[[2]int{worker, key}]
	i, _ := slices.BinarySearch(starts, from)
	return i < len(starts) && starts[i] <= to
}

// checkLoads checks invariant 1a, the fleet-wide bound on loads per refresh.
//
// Rule: for every key, every window of length W = TTL x (1 - Jitter) - 5ms
// that starts at the start of a load, the leased loads (those that corral
// ran under the key's lease: corral.IsFailOpen was false in the loader's
// context) that start in it number at most 1 + the events (eventsNear) in
// [window start - LeaseTTL, start of the last of them].
//
// Why it holds for corral: every such load runs under the key's lease,
// taken by fetch.lua only when the entry is missing or past its soft
// expiry (the stale window means no early refresh). A committed load sets
// the soft expiry to the server's now + TTL x [1-Jitter, 1+Jitter), so the
// next load of the key starts at least W after this one started, unless
// the commit did not happen or was undone: a Delete, a Redis restart, a
// lease that expired under a killed or stalled holder, a commit that failed
// because Redis failed (a degraded worker). The window's reach back by
// LeaseTTL covers a lease taken a little before its load reached the
// origin. A stampede (many loads of a key at one expiry) breaks the rule at
// once, and so does a cache that reloads more often than its TTL.
func checkLoads(ix *index, res *Result) {
	w := window(ix.ttl)
	for _, key := range sortedKeys(ix.loads) {
		var leased []Load
		for _, l := range ix.loads[key] {
			if l.FailOpen {
				res.FailOpen++
				continue
			}
			leased = append(leased, l)
		}
		res.Leased += len(leased)
		last := func(i int) int {
			j := i
			for j+1 < len(leased) && leased[j+1].Start < leased[i].Start+w {
				j++
			}
			return j
		}
		// The bound: greedy windows, each allowed 1 + its events.
		for i := 0; i < len(leased); {
			j := last(i)
			res.Bound += 1 + ix.eventsNear(key, leased[i].Start-LeaseTTL, leased[j].Start).total()
			i = j + 1
		}
		// The check: every window that starts at a load.
		for i := 0; i < len(leased); i++ {
			j := last(i)
			n := j - i + 1
			if n == 1 {
				continue
			}
			e := ix.eventsNear(key, leased[i].Start-LeaseTTL, leased[j].Start)
			if n <= 1+e.total() {
				continue
			}
			var who []string
			for _, l := range leased[i : j+1] {
				if len(who) == 8 {
					who = append(who, "...")
					break
				}
				who = append(who, fmt.Sprintf("w%d@%s", l.Worker, fmtT(l.Start)))
			}
			res.Violations = append(res.Violations, Violation{Invariant: InvLoads, Key: key, At: leased[i].Start,
				Msg: fmt.Sprintf("key k%d: %d loads started within %v (less than the shortest soft TTL), at most %d allowed (1 + %v): %s",
					key, n, leased[j].Start-leased[i].Start, 1+e.total(), e, strings.Join(who, " "))})
			i = j // one report per burst
		}
	}
}

// checkFlights checks invariant 1b, the per-process bound that holds even
// while Redis is down (fail-open).
//
// Rule: for every worker and key, at no instant are more than 2 of that
// worker's loads of the key in progress at the origin (between arrival and
// response), plus 1 for each event that can break a lease (a Delete of the
// key, a Redis restart, the worker being degraded) in [the earliest of them
// - LeaseTTL, the latest arrival].
//
// Why it holds for corral: in a process, concurrent callers of a key share
// one flight, and a flight runs at most one load (fail-open or under a
// lease); a background refresh runs outside the flight, under the key's
// lease, so one may overlap the next flight's fail-open load. A second
// refresh needs the first one's lease to be gone. Plain cache-aside, where
// every caller that misses loads, breaks it as soon as two callers of a key
// miss together.
func checkFlights(ix *index, res *Result) {
	byWK := map[[2]int][]Load{}
	for _, ls := range ix.loads {
		for _, l := range ls {
			wk := [2]int{l.Worker, l.Key}
			byWK[wk] = append(byWK[wk], l)
		}
	}
	keys := make([][2]int, 0, len(byWK))
	for wk := range byWK {
		keys = append(keys, wk)
	}
	slices.SortFunc(keys, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, wk := range keys {
		ls := byWK[wk]
		slices.SortFunc(ls, func(a, b Load) int { return cmp.Compare(a.Arrive, b.Arrive) })
		var active []Load
		reported := false
		for _, l := range ls {
			active = slices.DeleteFunc(active, func(a Load) bool { return a.End <= l.Arrive })
			if len(active) == 0 {
				reported = false
			}
			active = append(active, l)
			if len(active) <= 2 || reported {
				continue
			}
			from := active[0].Arrive
			for _, a := range active {
				from = min(from, a.Arrive)
			}
			e := ix.eventsNear(l.Key, from-LeaseTTL, l.Arrive)
			allowed := 2 + e.deletes + e.outages
			if ix.overlapsDegraded(l.Worker, from-LeaseTTL, l.Arrive) {
				allowed++
			}
			if len(active) <= allowed {
				continue
			}
			reported = true
			res.Violations = append(res.Violations, Violation{Invariant: InvLoads, Key: l.Key, Worker: l.Worker, At: l.Arrive,
				Msg: fmt.Sprintf("worker %d ran %d loads of key k%d at once (at most %d allowed: one flight and one background refresh, plus lease-breaking events)",
					l.Worker, len(active), l.Key, allowed)})
		}
	}
}

func (ix *index) overlapsDegraded(worker int, from, to time.Duration) bool {
	for _, iv := range ix.degraded[worker] {
		if iv.From <= to && iv.To >= from {
			return true
		}
	}
	return false
}
