package soak

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/corralhq/corral"
)

// Check checks the five invariants over r.
func Check(r *Records) Result {
	ix := newIndex(r)
	var res Result
	checkLoads(ix, &res)
	checkFlights(ix, &res)
	checkOutages(ix, &res)
	checkStale(ix, &res)
	checkCalls(ix, &res)
	for _, f := range r.Failures {
		res.Violations = append(res.Violations, Violation{Invariant: InvError, Key: -1, Worker: f.Worker, At: f.At,
			Msg: fmt.Sprintf("worker %d: %s", f.Worker, f.Msg)})
	}
	slices.SortStableFunc(res.Violations, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Invariant, b.Invariant), cmp.Compare(a.At, b.At))
	})
	return res
}

// index sorts the records for the checks.
type index struct {
	r        *Records
	ttl      time.Duration
	loads    map[int][]Load             // by key, sorted by Start
	takeover map[int][]time.Duration    // by key: kills of a worker that had started a load of it in the 2s before
	starts   map[[2]int][]time.Duration // by worker and key: load starts, sorted
	deletes  map[int][]Delete           // by key, sorted by End; every attempt
	okDels   map[int][]Delete           // by key, sorted by End; those that returned nil
	calls    map[[2]int][]Call          // by worker and key, sorted by Start
	degraded map[int][]Interval         // by worker, merged, sorted
	breakers map[int][]Breaker          // by worker, sorted by At
	killedAt map[int]time.Duration      // by worker
	outages  []Outage                   // sorted by Down
}

func newIndex(r *Records) *index {
	ix := &index{r: r, ttl: r.TTL, loads: map[int][]Load{}, takeover: map[int][]time.Duration{}, starts: map[[2]int][]time.Duration{},
		deletes: map[int][]Delete{}, okDels: map[int][]Delete{},
		calls: map[[2]int][]Call{}, degraded: map[int][]Interval{}, breakers: map[int][]Breaker{}, killedAt: map[int]time.Duration{}}
	degraded := slices.Clone(r.Degraded)
	for _, l := range r.Loads {
		ix.loads[l.Key] = append(ix.loads[l.Key], l)
		if l.FailOpen || l.Troubled {
			// The worker said so at the load's start: it was degraded then,
			// whether or not its report of the interval survived.
			degraded = append(degraded, Interval{Worker: l.Worker, From: l.Start, To: l.Start})
		}
	}
	ix.indexLoads()
	ix.indexDeletes()
	for _, c := range r.Calls {
		wk := [2]int{c.Worker, c.Key}
		ix.calls[wk] = append(ix.calls[wk], c)
	}
	for wk := range ix.calls {
		slices.SortFunc(ix.calls[wk], func(a, b Call) int { return cmp.Compare(a.Start, b.Start) })
	}
	ix.degraded = mergeByWorker(degraded)
	for _, b := range r.Breakers {
		ix.breakers[b.Worker] = append(ix.breakers[b.Worker], b)
	}
	for w := range ix.breakers {
		slices.SortStableFunc(ix.breakers[w], func(a, b Breaker) int { return cmp.Compare(a.At, b.At) })
	}
	for _, k := range r.Kills {
		ix.killedAt[k.Worker] = k.At
	}
	ix.outages = slices.SortedFunc(slices.Values(r.Outages), func(a, b Outage) int { return cmp.Compare(a.Down, b.Down) })
	return ix
}

// indexLoads sorts each key's loads by start, and indexes the loads that
// followed a kill or were cut short by a closing worker (takeovers) and
// each worker's load starts per key.
func (ix *index) indexLoads() {
	for _, k := range ix.r.Kills {
		for key, ls := range ix.loads {
			if slices.ContainsFunc(ls, func(l Load) bool {
				return l.Worker == k.Worker && l.Start <= k.At && l.Start >= k.At-2*time.Second
			}) {
				ix.takeover[key] = append(ix.takeover[key], k.At)
			}
		}
	}
	for k := range ix.loads {
		slices.SortFunc(ix.loads[k], func(a, b Load) int { return cmp.Compare(a.Start, b.Start) })
		for _, l := range ix.loads[k] {
			wk := [2]int{l.Worker, k}
			ix.starts[wk] = append(ix.starts[wk], l.Start)
			// A worker closing its Cache at the end: Close cancels a load
			// still running after its grace and hands the lease back, and
			// a worker not yet stopped loads the key again.
			if l.Cut && ix.r.Stopped > 0 && l.End >= ix.r.Stopped {
				ix.takeover[k] = append(ix.takeover[k], l.End)
			}
		}
	}
}

// indexDeletes indexes the deletes, and those that succeeded, by key and
// end.
func (ix *index) indexDeletes() {
	for _, d := range ix.r.Deletes {
		ix.deletes[d.Key] = append(ix.deletes[d.Key], d)
		if d.Err == "" {
			ix.okDels[d.Key] = append(ix.okDels[d.Key], d)
		}
	}
	for _, m := range []map[int][]Delete{ix.deletes, ix.okDels} {
		for k := range m {
			slices.SortFunc(m[k], func(a, b Delete) int { return cmp.Compare(a.End, b.End) })
		}
	}
}

// mergeByWorker returns each worker's degraded intervals, sorted, with
// those that overlap merged.
func mergeByWorker(degraded []Interval) map[int][]Interval {
	byWorker := map[int][]Interval{}
	for _, iv := range degraded {
		byWorker[iv.Worker] = append(byWorker[iv.Worker], iv)
	}
	for w, ivs := range byWorker {
		slices.SortFunc(ivs, func(a, b Interval) int { return cmp.Compare(a.From, b.From) })
		merged := ivs[:1]
		for _, iv := range ivs[1:] {
			last := &merged[len(merged)-1]
			if iv.From <= last.To {
				last.To = max(last.To, iv.To)
				continue
			}
			merged = append(merged, iv)
		}
		byWorker[w] = merged
	}
	return byWorker
}

// checkStale checks invariant 2.
//
// Rule: a call of key K that started after a Delete of K returned nil (and
// after the version bump before it) returns a version at least the bumped
// one, with two exceptions:
//
//   - It joined an in-process flight of its own worker that had started
//     before that Delete returned: its worker has another call of K that
//     started before the Delete returned, was still waiting when this call
//     started, and returned the same version. Counted (StaleJoined).
//   - It was answered from its worker's memory (its outcome was
//     EventFailSafe) while its worker could not use Redis: the call
//     overlaps a restart's [Down, Up + RecoveryGrace], or began while the
//     worker's breaker was open by its own report (a stall past
//     RedisTimeout, of the machine or of Redis); and its value is one that
//     a fail-open load of the worker returned (the key, the version)
//     within heldFor + busySlack before the call began. Counted
//     (StaleFailSafe). An answer from memory while the worker's breaker
//     was closed outside every restart's window, or with a value no such
//     load returned, is a violation.
//
// Why: Delete removes the entry and revokes the lease, so no load that
// started before it (and may have read the old version) can commit after
// it, and every fetch.lua that runs after it misses. corral promises
// "a call that starts after a Delete or Set of key returned never joins a
// flight begun before it" for the Cache that deleted; in other processes a
// call may join a flight already under way, which answers with what it
// found (Fetch's doc: "A call that joins a flight already under way is
// answered by that flight's load"). And a process that cannot use Redis
// answers from memory what its fail-open load returned, for heldFor at
// most (corral's failsafe.go): it cannot see a Delete made meanwhile by
// another process (here the orchestrator, whose breaker may close before
// the worker's), which is fail-safe's documented trade-off. In the soak
// Redis is unusable only around its restarts; RecoveryGrace is how long
// after Up a worker's breaker may stay tripped.
func checkStale(ix *index, res *Result) {
	for _, c := range ix.r.Calls {
		dels := ix.okDels[c.Key]
		if c.Err != "" || len(dels) == 0 {
			continue
		}
		// The last Delete of the key that returned before c started.
		i, _ := slices.BinarySearchFunc(dels, c.Start, func(d Delete, t time.Duration) int {
			if d.End < t {
				return -1
			}
			return 1
		})
		if i == 0 {
			continue
		}
		// Versions only grow, so the latest Delete is the strictest.
		d := dels[i-1]
		for _, e := range dels[:i] {
			if e.Version > d.Version {
				d = e
			}
		}
		if c.Version >= d.Version {
			continue
		}
		if c.FailSafe() {
			ix.staleFailSafe(c, d, res)
			continue
		}
		if g, ok := ix.joinedEarlierFlight(c, d.End); ok {
			res.StaleJoined++
			if len(res.StaleJoinedExamples) < 5 {
				res.StaleJoinedExamples = append(res.StaleJoinedExamples, fmt.Sprintf(
					"worker %d: Fetch of k%d [%s, %s] returned version %d after the Delete that returned at t=%s (version now %d), as did its Fetch [%s, %s] begun before it",
					c.Worker, c.Key, fmtT(c.Start), fmtT(c.End), c.Version, fmtT(d.End), d.Version, fmtT(g.Start), fmtT(g.End)))
			}
			continue
		}
		if k, ok := ix.killedAt[c.Worker]; ok && k >= c.End && k-c.End < 200*time.Millisecond {
			res.Unverifiable++
			continue
		}
		res.Violations = append(res.Violations, Violation{Invariant: InvStale, Key: c.Key, Worker: c.Worker, At: c.Start,
			Msg: fmt.Sprintf("worker %d: Fetch of k%d started at t=%s, after the Delete that returned at t=%s (version now %d), and returned version %d (outcome %v)",
				c.Worker, c.Key, fmtT(c.Start), fmtT(d.End), d.Version, c.Version, c.Outcome)})
	}
}

// staleFailSafe judges c, answered from memory with a value older than the
// Delete d (see checkStale).
func (ix *index) staleFailSafe(c Call, d Delete, res *Result) {
	what := fmt.Sprintf("worker %d: Fetch of k%d [%s, %s] was answered from memory (fail-safe) with version %d, after the Delete that returned at t=%s (version now %d)",
		c.Worker, c.Key, fmtT(c.Start), fmtT(c.End), c.Version, fmtT(d.End), d.Version)
	var where string
	if i, ok := ix.restartDuring(c.Start, c.End); ok {
		o := ix.outages[i]
		where = fmt.Sprintf("in Redis restart %d (down t=%s, up t=%s)", i+1, fmtT(o.Down), fmtT(o.Up))
	} else if ix.breakerOpenAt(c.Worker, c.Start) {
		// Not a restart, but the worker's own verdict that it could not
		// use Redis (a stall of the machine, or of Redis, past
		// RedisTimeout): what fail-safe is for, and what the worker told.
		where = "while its worker's breaker was open"
	} else {
		res.Violations = append(res.Violations, Violation{Invariant: InvStale, Key: c.Key, Worker: c.Worker, At: c.Start,
			Msg: fmt.Sprintf("%s, outside every Redis restart's window (down to %v after up), its breaker closed%s",
				what, RecoveryGrace, ix.breakerNote(c.Worker, c.Start))})
		return
	}
	l, ok := ix.heldLoad(c)
	if !ok {
		res.Violations = append(res.Violations, Violation{Invariant: InvStale, Key: c.Key, Worker: c.Worker, At: c.Start,
			Msg: fmt.Sprintf("%s, %s, but no fail-open load of the worker returned that version in the %v before%s",
				what, where, heldFor(ix.ttl)+busySlack, ix.breakerNote(c.Worker, c.Start))})
		return
	}
	res.StaleFailSafe++
	if len(res.StaleFailSafeExamples) < 5 {
		res.StaleFailSafeExamples = append(res.StaleFailSafeExamples, fmt.Sprintf(
			"%s, %s: what its fail-open load [%s, %s] returned%s",
			what, where, fmtT(l.Start), fmtT(l.End), ix.breakerNote(c.Worker, c.Start)))
	}
}

// breakerOpenAt reports whether worker's breaker was open at t, as the
// worker reported its changes: its latest change at or before t was not a
// closing.
func (ix *index) breakerOpenAt(worker int, t time.Duration) bool {
	bs := ix.breakers[worker]
	i, _ := slices.BinarySearchFunc(bs, t, func(b Breaker, t time.Duration) int {
		if b.At <= t {
			return -1
		}
		return 1
	})
	return i > 0 && bs[i-1].State != corral.EventBreakerClosed
}

// restartDuring returns a restart whose window, from its Down to
// RecoveryGrace after its Up, overlaps [from, to].
func (ix *index) restartDuring(from, to time.Duration) (int, bool) {
	for i, o := range ix.outages {
		if o.Down <= to && from <= o.Up+RecoveryGrace {
			return i, true
		}
	}
	return 0, false
}

// heldLoad returns the fail-open load of c's worker and key whose value c,
// answered from memory, may have been: one that returned c's version and
// ended at most heldFor + busySlack before c began (its value was kept once
// the worker read the response, a little after the origin wrote it).
func (ix *index) heldLoad(c Call) (Load, bool) {
	ls := ix.loads[c.Key] // by Start
	for j := len(ls) - 1; j >= 0; j-- {
		l := ls[j]
		if l.Worker == c.Worker && l.FailOpen && l.Version == c.Version && l.End <= c.End &&
			c.Start-l.End <= heldFor(ix.ttl)+busySlack {
			return l, true
		}
	}
	return Load{}, false
}

// breakerNote describes worker's breaker at t, as the worker reported its
// changes, for a violation's message: since when it was open, and when it
// closed next.
func (ix *index) breakerNote(worker int, t time.Duration) string {
	bs := ix.breakers[worker]
	i, _ := slices.BinarySearchFunc(bs, t, func(b Breaker, t time.Duration) int {
		if b.At <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		return fmt.Sprintf("; worker %d reported no breaker change before", worker)
	}
	if b := bs[i-1]; b.State == corral.EventBreakerClosed {
		return fmt.Sprintf("; worker %d's breaker closed at t=%s", worker, fmtT(b.At))
	}
	from := i - 1
	for from > 0 && bs[from-1].State != corral.EventBreakerClosed {
		from--
	}
	note := fmt.Sprintf("; worker %d's breaker open since t=%s", worker, fmtT(bs[from].At))
	half := false
	for _, b := range bs[from:] { // open until the first close, at or after i
		switch {
		case b.State == corral.EventBreakerHalfOpen && !half:
			half = true
			note += fmt.Sprintf(", half-open at t=%s (failures in a row had opened it)", fmtT(b.At))
		case b.State == corral.EventBreakerClosed:
			return note + fmt.Sprintf(", closed at t=%s", fmtT(b.At))
		}
	}
	return note + ", not reported closed"
}

// joinedEarlierFlight reports whether c may have joined an in-process
// flight begun before before: its worker had a call g of the same key that
// started before before, was still waiting when c started, and returned the
// same version.
func (ix *index) joinedEarlierFlight(c Call, before time.Duration) (g Call, ok bool) {
	calls := ix.calls[[2]int{c.Worker, c.Key}]
	i, _ := slices.BinarySearchFunc(calls, before, func(g Call, t time.Duration) int { return cmp.Compare(g.Start, t) })
	for j := i - 1; j >= 0 && calls[j].Start >= c.Start-2*Deadline; j-- {
		g := calls[j]
		if g.Err == "" && g.End >= c.Start && g.Version == c.Version {
			return g, true
		}
	}
	return Call{}, false
}

// checkCalls checks invariants 3 and 4.
//
// Rule 3: every call returns within Deadline + DeadlineSlack of its start.
// Each Fetch has a context with Deadline; corral promises that every
// caller's wait ends with its own context.
//
// Rule 4: no call returns an error. Fail-open is on and the origin never
// fails, so a value can always be had: while Redis is down the loader is
// called directly, after a RedisTimeout (200ms) at most. A worker killed in
// the middle of calls records nothing for them.
func checkCalls(ix *index, res *Result) {
	for _, c := range ix.r.Calls {
		if d := c.End - c.Start; d > Deadline+DeadlineSlack {
			res.Violations = append(res.Violations, Violation{Invariant: InvDeadline, Key: c.Key, Worker: c.Worker, At: c.Start,
				Msg: fmt.Sprintf("worker %d: Fetch of k%d took %v, past its %v deadline + %v", c.Worker, c.Key, d.Round(time.Millisecond), Deadline, DeadlineSlack)})
		}
		if c.Err != "" {
			res.Violations = append(res.Violations, Violation{Invariant: InvError, Key: c.Key, Worker: c.Worker, At: c.Start,
				Msg: fmt.Sprintf("worker %d: Fetch of k%d failed after %v: %s", c.Worker, c.Key, (c.End - c.Start).Round(time.Millisecond), c.Err)})
		}
	}
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fmtT formats a time since the epoch as seconds with milliseconds.
func fmtT(t time.Duration) string { return fmt.Sprintf("%.3fs", t.Seconds()) }
