package soak

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral"
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
// Rule: for every Redis restart, worker and key, the worker's fail-open
// loads of the key (those corral called directly: corral.IsFailOpen was
// true in the loader's context; the Troubled tag is not used) that began
// in the restart's window number at most allowedFailOpen: FailOpenPerRestart
// (2), or 1 + (Up - Down + recoverPause) / heldFor when more. A restart's
// window runs from its Down to RecoveryGrace after its Up, and ends where
// the next restart's begins: a load counts for the latest restart that
// went down at or before its start, if it is in that restart's window. So
// no load counts twice, and no window is longer than a lone restart's;
// windows that overlap do not pool their allowances either, so a burst of
// loads is not hidden by a restart that did not cause it. Fail-open loads
// outside every window (a stall made Redis look silent) are counted in
// the report, not judged here.
//
// Why it holds for corral: while a process cannot use Redis it answers
// from memory what a fail-open load of the key returned, for heldFor (the
// FailSafe Throttle, 1s, but never past the value's soft TTL: the soak's
// TTL, 500ms), and loads the key again only once that has run out; its
// fail-open loads of a key are one at a time. So its loads of a key in a
// restart are at least heldFor apart, from Down to the moment its recovery
// probe sees Redis again, within recoverPause of Up (see RecoveryGrace for
// the rest of the grace, which a busy machine may take). With the default
// RedisDowntime and a prompt restart that is 2: one at Down, one as the
// first value's hold runs out, about when Redis is back. A restart that
// keeps Redis down longer (a longer --redis-downtime, or a redis-server
// slow to start on a busy machine: Up - Down is measured) allows one more
// per heldFor. A process that loads on every flight while Redis is down,
// as coalescing alone does, breaks it at once: its flights follow one
// another every origin latency. So does one that keeps failing open long
// after Redis is back: its third load comes a heldFor after the second.
func checkOutages(ix *index, res *Result) {
	if len(ix.outages) == 0 {
		return
	}
	counted := map[slot][]Load{}
	for _, key := range sortedKeys(ix.loads) {
		for _, l := range ix.loads[key] { // by Start
			if !l.FailOpen {
				continue
			}
			if i, ok := ix.restartAt(l.Start); ok {
				s := slot{i, l.Worker, key}
				counted[s] = append(counted[s], l)
			} else {
				res.FailOpenOutside++
			}
		}
	}
	ix.outageFigures(counted, res)
	ix.recoveryFigures(res)
	slots := make([]slot, 0, len(counted))
	for s, ls := range counted {
		if len(ls) > ix.allowedFailOpen(s.restart) {
			slots = append(slots, s)
		}
	}
	slices.SortFunc(slots, compareSlots)
	for _, s := range slots {
		ls := counted[s]
		o := ix.outages[s.restart]
		allowed := ix.allowedFailOpen(s.restart)
		var at []string
		for _, l := range ls {
			if len(at) == 8 {
				at = append(at, "...")
				break
			}
			at = append(at, fmtT(l.Start))
		}
		res.Violations = append(res.Violations, Violation{Invariant: InvOutage, Key: s.key, Worker: s.worker,
			At: ls[allowed].Start,
			Msg: fmt.Sprintf("worker %d: %d fail-open loads of key k%d in Redis restart %d (down t=%s, up t=%s, counted until t=%s), at most %d allowed: %s%s",
				s.worker, len(ls), s.key, s.restart+1, fmtT(o.Down), fmtT(o.Up), fmtT(ix.windowEnd(s.restart)),
				allowed, strings.Join(at, " "), ix.breakerNote(s.worker, ls[allowed].Start))})
	}
}

// allowedFailOpen is invariant 5's bound for restart i (see checkOutages).
func (ix *index) allowedFailOpen(i int) int {
	o := ix.outages[i]
	return max(FailOpenPerRestart, 1+int((o.Up-o.Down+recoverPause)/heldFor(ix.ttl)))
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
	for i, o := range ix.outages {
		res.LongestDown = max(res.LongestDown, o.Up-o.Down)
		if ix.allowedFailOpen(i) > FailOpenPerRestart {
			res.LongRestarts++
		}
	}
}

// recoveryFigures sets the report's figures of how long after each
// restart's Up the workers' breakers closed: for each restart and each
// worker whose breaker was reported open in the restart's window, the
// first close after the last time it opened (or went half-open) in the
// window. A worker whose close was not reported (killed, or the run ended)
// is left out.
func (ix *index) recoveryFigures(res *Result) {
	var sum time.Duration
	for i, o := range ix.outages {
		end := ix.windowEnd(i)
		next := time.Duration(1<<63 - 1)
		if i+1 < len(ix.outages) {
			next = ix.outages[i+1].Down
		}
		for _, w := range sortedKeys(ix.breakers) {
			opened := -1
			for j, b := range ix.breakers[w] {
				if b.At >= o.Down && b.At <= end && b.State != corral.EventBreakerClosed {
					opened = j
				}
			}
			if opened < 0 {
				continue
			}
			for _, b := range ix.breakers[w][opened:] {
				if b.At >= next {
					break
				}
				if b.State == corral.EventBreakerClosed {
					lag := max(b.At-o.Up, 0)
					res.RecoveryMax = max(res.RecoveryMax, lag)
					sum += lag
					res.Recoveries++
					break
				}
			}
		}
	}
	if res.Recoveries > 0 {
		res.RecoveryMean = sum / time.Duration(res.Recoveries)
	}
}

// restartAt returns the restart whose window holds t: the latest that went
// down at or before t, if t is at most RecoveryGrace after its Up.
func (ix *index) restartAt(t time.Duration) (int, bool) {
	// n: how many restarts went down at or before t.
	n, _ := slices.BinarySearchFunc(ix.outages, t, func(o Outage, t time.Duration) int {
		if o.Down <= t {
			return -1
		}
		return 1
	})
	if n == 0 || t > ix.outages[n-1].Up+RecoveryGrace {
		return 0, false
	}
	return n - 1, true
}

// windowEnd is where restart i's window ends: RecoveryGrace after its Up,
// or where the next restart's begins.
func (ix *index) windowEnd(i int) time.Duration {
	end := ix.outages[i].Up + RecoveryGrace
	if i+1 < len(ix.outages) {
		end = min(end, ix.outages[i+1].Down)
	}
	return end
}
