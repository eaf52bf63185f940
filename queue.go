package corral

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
)

// Nothing is forgotten. A Delete or Set that cannot reach Redis (refused,
// silent, the breaker open, the write refused by a replica, the caller gone
// with the outcome unknown) still returns its error, and drops this
// process's own copies at once; but the invalidation is also queued, and
// applied in the background, in order, as soon as Redis answers again
// (auto-recovery): by the node's recovery probe before the node's breaker
// closes (internal/transport/down.go), and otherwise by the Cache's
// replayer, which tries every replayEvery while invalidations wait. A Set
// is applied as a Delete of its key: a newer value may have been written
// meanwhile. Until a key's invalidation has landed, this process does not
// read that key from Redis (pending): its calls are answered as while Redis
// is down (fail-safe, or fail-open), never with what Redis held before the
// invalidation.
//
// The queue holds at most Options.MaxPendingInvalidations; past that, a new
// invalidation is dropped, counted (Stats.InvalidationsDropped) and warned
// of. Close tries to apply what is queued within its bound.

// DefaultMaxPendingInvalidations is Options.MaxPendingInvalidations's
// default.
const DefaultMaxPendingInvalidations = 10_000

// replayEvery is how often the replayer tries the queue while
// invalidations wait (spread ±50%).
const replayEvery = 250 * time.Millisecond

// invalidation is one queued Delete (or Set, applied as a Delete).
type invalidation struct {
	key string
	seq uint64 // its place in the queue's order, from 1
}

// invalidations is a Cache's queue (see the top of this file).
//
// A replay applies a snapshot of the queue; an invalidation of a key that
// the snapshot holds may already have been sent, so a new one of the key
// is queued again, never merged into it: it must land after the writes
// made before it. One not yet taken by a replay does what a new one would,
// and absorbs it. A successful write of a key drops its invalidations not
// yet taken (superseded): they came before the write, and would undo it.
type invalidations struct {
	mu      sync.Mutex
	ops     []invalidation    // in the order they were made
	pending map[string]int    // keys with an invalidation queued, and how many
	latest  map[string]uint64 // each pending key's latest invalidation
	seq     uint64            // the latest invalidation's
	taken   uint64            // a replay may have sent those up to this one
	n       atomic.Int32      // len(ops): read on every call, without the lock
	max     int
	wake    chan struct{} // a new invalidation: the replayer tries at once

	replayMu sync.Mutex // one replay at a time, so that order holds
	warn     everyMinute
}

func newInvalidations(max int) *invalidations {
	return &invalidations{pending: map[string]int{}, latest: map[string]uint64{}, max: max, wake: make(chan struct{}, 1)}
}

// has reports whether key has an invalidation queued.
func (q *invalidations) has(key string) bool {
	if q.n.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending[key] > 0
}

// add queues an invalidation of key, unless one not yet taken by a replay
// is queued already (it does the same): added reports whether it did; ok
// is false when the queue is full. The replayer is woken apart (kick), once
// the addition was counted.
func (q *invalidations) add(key string) (added, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending[key] > 0 && q.latest[key] > q.taken {
		return false, true
	}
	if len(q.ops) >= q.max {
		return false, false
	}
	q.seq++
	q.ops = append(q.ops, invalidation{key: key, seq: q.seq})
	q.pending[key]++
	q.latest[key] = q.seq
	q.n.Store(int32(len(q.ops)))
	return true, true
}

// superseded drops key's invalidations not yet taken by a replay: a write
// of key just reached Redis after them (see invalidations). It returns how
// many it dropped.
func (q *invalidations) superseded(key string) int {
	if q.n.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending[key] == 0 || q.latest[key] <= q.taken {
		return 0
	}
	var gone []invalidation
	for _, o := range q.ops {
		if o.key == key && o.seq > q.taken {
			gone = append(gone, o)
		}
	}
	q.removeLocked(gone)
	return len(gone)
}

// kick wakes the replayer.
func (q *invalidations) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// abandon drops what is still queued: Close could not apply it.
func (q *invalidations) abandon(c *Cache) {
	ops := q.snapshot(true)
	q.done(ops)
	for _, inv := range ops {
		c.stats.dropped.Add(1)
		c.observe(context.Background(), EventInvalidationDropped, inv.key)
	}
	if len(ops) > 0 {
		c.opts.Logger.Warn("corral: Close could not apply the invalidations queued for Redis; Redis may serve the old values until their TTL",
			"count", len(ops), "first", ops[0].key)
	}
}

// snapshot returns the invalidations queued now, in order; take marks
// them taken by a replay (see invalidations).
func (q *invalidations) snapshot(take bool) []invalidation {
	q.mu.Lock()
	defer q.mu.Unlock()
	if take {
		q.taken = q.seq
	}
	return append([]invalidation(nil), q.ops...)
}

// done removes ops (applied, or dropped) from the queue.
func (q *invalidations) done(ops []invalidation) {
	if len(ops) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(ops)
}

// removeLocked removes ops from the queue; q.mu is held.
func (q *invalidations) removeLocked(ops []invalidation) {
	gone := make(map[uint64]bool, len(ops))
	for _, o := range ops {
		gone[o.seq] = true
	}
	kept := q.ops[:0]
	for _, o := range q.ops {
		if !gone[o.seq] {
			kept = append(kept, o)
			continue
		}
		if q.pending[o.key]--; q.pending[o.key] <= 0 {
			delete(q.pending, o.key)
		}
		delete(q.latest, o.key)
	}
	clear(q.ops[len(kept):])
	q.ops = kept
	for _, o := range kept { // the keys whose latest went: their latest is among these
		if o.seq > q.latest[o.key] {
			q.latest[o.key] = o.seq
		}
	}
	q.n.Store(int32(len(q.ops)))
}

// errPending is the Redis failure of a call of a key whose invalidation
// Redis is yet to get: the call skips Redis (as if its breaker were open),
// and is answered as while Redis is down.
var errPending = errorf("%w (an invalidation of the key is queued for Redis)", ErrCircuitOpen)

// pendingPeek is the peek of such a key in a FetchMany: failed with
// errPending, never sent.
var pendingPeek = func() *peekCall {
	pc := &peekCall{done: make(chan struct{}), err: errPending}
	close(pc.done)
	return pc
}()

// queueable reports whether a write that failed with err may not have
// reached Redis, and is to be applied again: Redis failed (refused,
// silent, the breaker open), refused the write (a replica, out of memory),
// or the caller left with the outcome unknown.
func queueable(err error) bool {
	return redisFailed(err) || errors.Is(err, ErrWriteRefused) || transport.Says(err, transport.CallerGone)
}

// invalidateLater queues the invalidation of key that failed with err,
// when it may not have reached Redis, and returns the error for the caller:
// err, saying what became of the invalidation.
func (c *Cache) invalidateLater(ctx context.Context, key string, err error) error {
	if !queueable(err) || c.ctx.Err() != nil {
		return err
	}
	added, ok := c.queue.add(key)
	if !ok {
		c.stats.dropped.Add(1)
		c.observe(ctx, EventInvalidationDropped, key)
		if c.queue.warn.allow() {
			c.opts.Logger.Warn("corral: the queue of invalidations for Redis is full; this one is dropped, and Redis may serve the old value until its TTL",
				"key", key, "max", c.opts.MaxPendingInvalidations, errAttr(err))
		}
		return errorf("%w (not queued for Redis: %d invalidations wait already)", err, c.opts.MaxPendingInvalidations)
	}
	if added { // not again for one already queued, which does the same
		c.stats.queued.Add(1)
		c.observe(ctx, EventInvalidationQueued, key)
		c.queue.kick()
	}
	return errorf("%w (queued: applied once Redis answers)", err)
}

// supersede drops the queued invalidations of key that a Set or Delete of
// it, which just reached Redis, makes moot (see invalidations): replayed
// later, they would undo it. They count as replayed: what they were to do
// is done.
func (c *Cache) supersede(ctx context.Context, key string) {
	for range c.queue.superseded(key) {
		c.stats.replayed.Add(1)
		c.observe(ctx, EventInvalidationReplayed, key)
	}
}

// flushQueue is Close's replay: it tries the queue again, 10 ms apart
// and then up to 100 ms, until it is empty or Close's bound ends (c.drain):
// a Redis back a moment ago may still refuse a first try (the client's pool
// remembers its failed dials for a while).
func (c *Cache) flushQueue() {
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		c.replay(c.drain, "", true)
		if c.queue.n.Load() == 0 {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-c.drain.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// replayer applies the queue in the background (see the top of this
// file), until Close.
func (c *Cache) replayer() {
	defer c.wg.Done()
	var timer *time.Timer
	for {
		var tick <-chan time.Time
		if c.queue.n.Load() > 0 {
			timer = time.NewTimer(spread(replayEvery, 0.5, c.opts.Rand))
			tick = timer.C
		}
		select {
		case <-c.ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-c.queue.wake:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		c.replay(c.ctx, "", false)
	}
}

// replay applies the queued invalidations, in order, each bounded by
// RedisTimeout: only those of node's keys when node is not "" (a node's
// recovery, whose ops pass its tripped breaker: recovery), otherwise all.
// An invalidation of a node that failed waits for the next replay, and so
// do the later ones of that node; one Redis denies (ErrPermission) is
// dropped, and warned of.
func (c *Cache) replay(ctx context.Context, node string, recovery bool) {
	q := c.queue
	q.replayMu.Lock()
	defer q.replayMu.Unlock()
	failed := map[string]bool{} // nodes whose invalidation failed in this replay
	var applied, dropped []invalidation
	for _, inv := range q.snapshot(true) {
		n := wire.NewNames(c.opts.Prefix, inv.key)
		at := c.store.nodeOf(n.Entry)
		if node != "" && at != node || failed[at] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		rctx, cancel := context.WithTimeout(ctx, c.opts.RedisTimeout)
		err := c.store.deleteAs(rctx, n, recovery)
		cancel()
		switch {
		case err == nil:
			applied = append(applied, inv)
		case errors.Is(err, ErrPermission):
			dropped = append(dropped, inv)
			c.permissionDenied(err)
			warnOnce(c.opts.Logger, &q.warn, "corral: a queued invalidation was dropped: Redis denies it", "key", inv.key, errAttr(err))
		default:
			failed[at] = true
			c.opts.Logger.Debug("corral: a queued invalidation could not be applied yet", "key", inv.key, "recovery", recovery, errAttr(err))
		}
	}
	q.done(applied)
	q.done(dropped)
	for _, inv := range applied {
		c.stats.replayed.Add(1)
		c.observe(context.Background(), EventInvalidationReplayed, inv.key)
	}
	for _, inv := range dropped {
		c.stats.dropped.Add(1)
		c.observe(context.Background(), EventInvalidationDropped, inv.key)
	}
}

// spread returns d spread uniformly by ±f (a fraction of it).
func spread(d time.Duration, f float64, rnd func() float64) time.Duration {
	return time.Duration(float64(d) * (1 + f*(2*rnd()-1)))
}
