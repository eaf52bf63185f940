package replay

import (
	"cmp"
	"context"
	"time"

	"github.com/corralhq/corral/internal/errprefix"
)

// Run applies the queue in the background (see the package doc) until ctx
// ends: at once when an invalidation is added (Kick), and every
// replayEvery while some wait.
func (q *Queue) Run(ctx context.Context) {
	var timer *time.Timer
	for {
		var tick <-chan time.Time
		if q.n.Load() > 0 {
			timer = time.NewTimer(time.Duration(float64(replayEvery) * (0.5 + q.cfg.Rand())))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-q.wake:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		q.Replay(ctx, "", false)
	}
}

// Flush is a closing cache's replay: it tries the queue again, 10 ms apart
// and then up to 100 ms, until it is empty or ctx ends (the cache's bound
// on closing): a Redis back a moment ago may still refuse a first try (the
// client's pool remembers its failed dials for a while). The invalidations
// pass tripped breakers (recovery): Redis may be back, not yet probed.
func (q *Queue) Flush(ctx context.Context) {
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		q.Replay(ctx, "", true)
		if q.n.Load() == 0 {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Replay applies the queued invalidations, in order, each bounded by
// Timeout: only those of node's keys when node is not "" (a node's
// recovery, whose ops pass its tripped breaker: recovery), otherwise all.
// An invalidation of a node that failed waits for the next replay, and so
// do the later ones of that node; one Redis refused for good (Denied) is
// dropped. It returns the first failure, or nil when every invalidation
// of node (of all nodes for "") that it tried landed or was dropped.
func (q *Queue) Replay(ctx context.Context, node string, recovery bool) error {
	q.replayMu.Lock()
	defer q.replayMu.Unlock()
	failed := map[string]bool{} // nodes whose invalidation failed in this replay
	var applied, dropped []invalidation
	var refusals []error
	var first error
	for _, inv := range q.snapshot(true) {
		at := q.cfg.NodeOf(inv.key)
		if node != "" && at != node || failed[at] {
			continue
		}
		if err := ctx.Err(); err != nil {
			first = cmp.Or(first, err)
			break
		}
		rctx, cancel := context.WithTimeout(ctx, q.cfg.Timeout)
		err := q.cfg.Delete(rctx, inv.key, recovery)
		cancel()
		switch {
		case err == nil:
			applied = append(applied, inv)
		case q.cfg.Denied(err):
			dropped, refusals = append(dropped, inv), append(refusals, err)
		default:
			failed[at], first = true, cmp.Or(first, err)
			q.cfg.Logger.Debug("corral: a queued invalidation could not be applied yet", "key", inv.key, "recovery", recovery,
				errprefix.Attr(errprefix.Corral, err))
		}
	}
	q.done(applied)
	q.done(dropped)
	for _, inv := range applied {
		q.tell(context.Background(), Applied, inv.key)
	}
	for i, inv := range dropped {
		q.cfg.Refused(inv.key, refusals[i])
		q.tell(context.Background(), Dropped, inv.key)
	}
	return first
}
