// Package replay keeps the invalidations (Deletes, and Sets applied as
// Deletes) that a Cache could not get to Redis, and applies them, in order,
// as soon as Redis answers again: by a recovering node's probe before its
// breaker closes (Replay with its node), and otherwise by a loop (Run) that
// tries every replayEvery while invalidations wait. Until a key's
// invalidation has landed, the Cache does not read that key from Redis
// (Has): it must never serve what Redis held before the invalidation.
//
// A Queue knows keys, their order and their nodes, and what became of
// each invalidation (an Event); how an invalidation is sent, and what is
// counted or told of each, is its Config's.
package replay

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Config is what a Queue needs from the cache it serves.
type Config struct {
	// Max bounds the invalidations queued; past it, Add refuses new ones.
	Max int
	// Timeout bounds each invalidation sent (RedisTimeout).
	Timeout time.Duration
	// Delete applies key's invalidation to Redis. recovery marks it as a
	// recovering node's own, which its tripped breaker lets through.
	Delete func(ctx context.Context, key string, recovery bool) error
	// NodeOf names the node that serves key: "" off a Cluster.
	NodeOf func(key string) string
	// Denied reports whether Redis refused an invalidation for good (an
	// ACL right missing): it is dropped rather than tried again.
	Denied func(err error) bool
	// Told is told what became of each invalidation (an Event), with the
	// context of the call that queued or superseded it (else a background
	// one). It may be nil.
	Told func(ctx context.Context, e Event, key string)
	// Refused is told of each invalidation Redis refused for good
	// (Denied), with its refusal, before it is told Dropped.
	Refused func(key string, err error)
	// Rand returns uniform random numbers in [0, 1), to spread Run's tries.
	Rand   func() float64
	Logger *slog.Logger
}

// An Event is what became of an invalidation.
type Event int

const (
	Queued  Event = iota // added to the queue (Invalidate)
	Applied              // landed in Redis; or made moot by a write of its key that did (Superseded)
	Dropped              // given up: the queue was full, Redis refused it for good, or the cache is closing (Abandon)
)

// tell tells cfg.Told that e became of key's invalidation.
func (q *Queue) tell(ctx context.Context, e Event, key string) {
	if q.cfg.Told != nil {
		q.cfg.Told(ctx, e, key)
	}
}

// replayEvery is how often Run tries the queue while invalidations wait
// (spread ±50%).
const replayEvery = 250 * time.Millisecond

// invalidation is one queued invalidation of a key.
type invalidation struct {
	key string
	seq uint64 // its place in the queue's order, from 1
}

// Queue is the invalidations Redis is yet to get (see the package doc).
//
// A replay applies a snapshot of the queue; an invalidation of a key that
// the snapshot holds may already have been sent, so a new one of the key
// is queued again, never merged into it: it must land after the writes
// made before it. One not yet taken by a replay does what a new one would,
// and absorbs it. A successful write of a key drops its invalidations not
// yet taken (Superseded): they came before the write, and would undo it.
type Queue struct {
	cfg Config

	mu      sync.Mutex
	ops     []invalidation    // in the order they were made
	pending map[string]int    // keys with an invalidation queued, and how many
	latest  map[string]uint64 // each pending key's latest invalidation
	seq     uint64            // the latest invalidation's
	taken   uint64            // a replay may have sent those up to this one
	n       atomic.Int32      // len(ops): read on every call, without the lock
	wake    chan struct{}     // a new invalidation: Run tries at once

	replayMu sync.Mutex // one replay at a time, so that order holds
}

// New returns an empty Queue.
func New(cfg Config) *Queue {
	return &Queue{cfg: cfg, pending: map[string]int{}, latest: map[string]uint64{}, wake: make(chan struct{}, 1)}
}

// Len returns how many invalidations are queued.
func (q *Queue) Len() int { return int(q.n.Load()) }

// Has reports whether key has an invalidation queued.
func (q *Queue) Has(key string) bool {
	if q.n.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending[key] > 0
}

// Invalidate queues an invalidation of key, tells Queued and wakes Run;
// or tells nothing when one not yet taken by a replay does the same
// already (see Add). It reports false, having told Dropped, when the
// queue is full.
func (q *Queue) Invalidate(ctx context.Context, key string) bool {
	added, ok := q.Add(key)
	switch {
	case !ok:
		q.tell(ctx, Dropped, key)
	case added:
		q.tell(ctx, Queued, key)
		q.Kick()
	}
	return ok
}

// Add queues an invalidation of key, unless one not yet taken by a replay
// is queued already (it does the same): added reports whether it did; ok
// is false when the queue is full. Run is woken apart (Kick), once the
// addition was counted.
func (q *Queue) Add(key string) (added, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending[key] > 0 && q.latest[key] > q.taken {
		return false, true
	}
	if len(q.ops) >= q.cfg.Max {
		return false, false
	}
	q.seq++
	q.ops = append(q.ops, invalidation{key: key, seq: q.seq})
	q.pending[key]++
	q.latest[key] = q.seq
	q.n.Store(int32(len(q.ops)))
	return true, true
}

// Superseded drops key's invalidations not yet taken by a replay: a write
// of key just reached Redis after them (see Queue), and replayed later,
// they would undo it. Each is told Applied: what it was to do is done. It
// returns how many it dropped.
func (q *Queue) Superseded(ctx context.Context, key string) int {
	n := q.supersede(key)
	for range n {
		q.tell(ctx, Applied, key)
	}
	return n
}

// supersede is Superseded, untold.
func (q *Queue) supersede(key string) int {
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

// Kick wakes Run.
func (q *Queue) Kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Abandon empties the queue, tells each invalidation Dropped, and returns
// their keys, in order: the cache is closing, and could not apply them.
func (q *Queue) Abandon() []string {
	ops := q.snapshot(true)
	q.done(ops)
	keys := make([]string, len(ops))
	for i, inv := range ops {
		keys[i] = inv.key
		q.tell(context.Background(), Dropped, inv.key)
	}
	return keys
}

// snapshot returns the invalidations queued now, in order; take marks
// them taken by a replay (see Queue).
func (q *Queue) snapshot(take bool) []invalidation {
	q.mu.Lock()
	defer q.mu.Unlock()
	if take {
		q.taken = q.seq
	}
	return append([]invalidation(nil), q.ops...)
}

// done removes ops (applied, or dropped) from the queue.
func (q *Queue) done(ops []invalidation) {
	if len(ops) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(ops)
}

// removeLocked removes ops from the queue; q.mu is held.
func (q *Queue) removeLocked(ops []invalidation) {
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
