package soak

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// slot is one worker's loads of one key in one Redis restart's window
// (invariant 5); restart indexes index.outages.
type slot struct{ restart, worker, key int }

func compareSlots(a, b slot) int {
	return cmp.Or(cmp.Compare(a.restart, b.restart), cmp.Compare(a.worker, b.worker), cmp.Compare(a.key, b.key))
}

// checkOutages checks invariant 5, the per-process bound on fail-open loads
// while Redis is down.
//
// Rule: for every Redis restart, worker and key, the worker's loads of the
// key that may have failed open (mayHaveFailedOpen: tagged by the worker, or
// in one of its degraded intervals, as invariant 1a leaves them out) and
// that began in the restart's window number at most FailOpenPerRestart (2).
// A restart's window runs from its Down to OutageGrace after its Up, and
// ends where the next restart's begins: a load counts for the latest
// restart that went down at or before its start, if it is in that
// restart's window. So no load counts twice, and no window is longer than
// a lone restart's; windows that overlap do not pool their allowances
// either, so a burst of loads is not hidden by a restart that did not
// cause it.
//
// The grace, OutageGrace (1.2s), is how long after Redis answers again
// (Up: it answered the orchestrator's PING) a worker may still fail open,
// from the bounds corral documents:
//   - 2 x RedisTimeout + 100ms: a call sent before Up may fail that long
//     after it was sent (the stall bound in corral.Options.RedisTimeout's
//     doc), and its failure may trip the worker's circuit breaker, or send
//     a half-open one back to open;
//   - BreakerCooldown: the open breaker skips Redis, every Fetch fails open;
//   - RedisTimeout: then the breaker lets one probe call through, and every
//     other Fetch fails open until it returns. Redis answers at once; the
//     RedisTimeout is the margin for the worker to read the reply, and for
//     a loader to begin, on a busy machine (2 cores shared by the workers,
//     the orchestrator and Redis).
//
// A load that began after the grace went through Redis, under the key's
// lease, even if its tag, held degradedHold after the last sign of
// trouble, says it may not have: it is left to invariant 1b. A leased load
// in the grace that the tag still covers counts, since the records cannot
// tell it from a fail-open one; so does a load in the window that failed
// open for another reason (a lost lease, a rejected commit).
//
// Why it holds for corral: while Redis is down, a process serves what it
// holds in memory and keeps a fail-open load's result for about a second,
// so it loads a key at most once per second of outage: at most 2 in a
// window of the default RedisDowntime (500ms) and the grace. (A longer
// --redis-downtime lets a sound cache make more.) A process that loads on
// every flight while Redis is down, as coalescing alone does, breaks it at
// once: its flights follow one another every origin latency.
func checkOutages(ix *index, res *Result) {
	if len(ix.outages) == 0 {
		return
	}
	counted := map[slot][]Load{}
	for _, key := range sortedKeys(ix.loads) {
		for _, l := range ix.loads[key] { // by Start
			if !ix.mayHaveFailedOpen(l) {
				continue
			}
			if i, ok := ix.restartAt(l.Start); ok {
				s := slot{i, l.Worker, key}
				counted[s] = append(counted[s], l)
			}
		}
	}
	ix.outageFigures(counted, res)
	slots := make([]slot, 0, len(counted))
	for s, ls := range counted {
		if len(ls) > FailOpenPerRestart {
			slots = append(slots, s)
		}
	}
	slices.SortFunc(slots, compareSlots)
	for _, s := range slots {
		ls := counted[s]
		o := ix.outages[s.restart]
		var at []string
		for _, l := range ls {
			if len(at) == 8 {
				at = append(at, "...")
				break
			}
			at = append(at, fmtT(l.Start))
		}
		res.Violations = append(res.Violations, Violation{Invariant: InvOutage, Key: s.key, Worker: s.worker,
			At: ls[FailOpenPerRestart].Start,
			Msg: fmt.Sprintf("worker %d: %d fail-open loads of key k%d in Redis restart %d (down t=%s, up t=%s, counted until t=%s), at most %d allowed: %s",
				s.worker, len(ls), s.key, s.restart+1, fmtT(o.Down), fmtT(o.Up), fmtT(ix.windowEnd(s.restart)),
				FailOpenPerRestart, strings.Join(at, " "))})
	}
}

// outageFigures sets the report's figures of invariant 5 from the loads it
// counted. The mean is over every worker and key that worker fetched (a
// call began in the window) or loaded in a restart's window: a worker that
// served a key from memory throughout counts, with 0 loads.
func (ix *index) outageFigures(counted map[slot][]Load, res *Result) {
	slots := map[slot]bool{}
	for _, c := range ix.r.Calls {
		if i, ok := ix.restartAt(c.Start); ok {
			slots[slot{i, c.Worker, c.Key}] = true
		}
	}
	for s, ls := range counted {
		slots[s] = true
		res.OutageLoads += len(ls)
		res.OutageMax = max(res.OutageMax, len(ls))
	}
	if len(slots) > 0 {
		res.OutageMean = float64(res.OutageLoads) / float64(len(slots))
	}
}

// restartAt returns the restart whose window holds t: the latest that went
// down at or before t, if t is at most OutageGrace after its Up.
func (ix *index) restartAt(t time.Duration) (int, bool) {
	// n: how many restarts went down at or before t.
	n, _ := slices.BinarySearchFunc(ix.outages, t, func(o Outage, t time.Duration) int {
		if o.Down <= t {
			return -1
		}
		return 1
	})
	if n == 0 || t > ix.outages[n-1].Up+OutageGrace {
		return 0, false
	}
	return n - 1, true
}

// windowEnd is where restart i's window ends: OutageGrace after its Up, or
// where the next restart's begins.
func (ix *index) windowEnd(i int) time.Duration {
	end := ix.outages[i].Up + OutageGrace
	if i+1 < len(ix.outages) {
		end = min(end, ix.outages[i+1].Down)
	}
	return end
}
