package corral

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/replay"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
)

// Nothing is forgotten: a Delete, Set, Expire or group invalidation that
// cannot reach Redis returns its error, applies here at once, and is
// queued, then applied in order as soon as Redis answers (internal/replay),
// before this process reads what it concerns from Redis again; at most
// Options.MaxPendingInvalidations. The rules: docs/design.md, section 4.4.

// DefaultMaxPendingInvalidations is Options.MaxPendingInvalidations's
// default.
const DefaultMaxPendingInvalidations = 10_000

// newQueue returns the Cache's queue of invalidations for Redis.
func (c *Cache) newQueue() *replay.Queue {
	return replay.New(replay.Config{
		Max: c.opts.MaxPendingInvalidations, Timeout: c.opts.RedisTimeout, Rand: c.opts.Rand, Logger: c.opts.Logger,
		Delete: c.replayed,
		NodeOf: func(key string) string {
			if key[0] != queuedKey {
				return c.store.pipe.NodeOf(wire.ClearName(c.opts.Prefix))
			}
			return c.store.pipe.NodeOf(wire.EntryName(c.opts.Prefix, key[1:]))
		},
		Denied: func(err error) bool { return errors.Is(err, ErrPermission) },
		Told:   c.toldQueue,
		Refused: func(key string, err error) {
			c.warn.PermissionDenied(err)
			c.warn.queue.Log(c.opts.Logger, "corral: a queued invalidation was dropped: Redis denies it", "key", key[1:], errAttr(err))
		},
	})
}

// toldQueue counts (Stats.Invalidations…) and tells the Observer what
// became of an invalidation queued for Redis.
func (c *Cache) toldQueue(ctx context.Context, e replay.Event, key string) {
	key = key[1:] // the kind of invalidation dropped (queuedKey...)
	[...]*atomic.Uint64{replay.Queued: &c.stats.Queued, replay.Applied: &c.stats.Replayed, replay.Dropped: &c.stats.Dropped}[e].Add(1)
	c.observe(ctx, [...]EventKind{replay.Queued: EventInvalidationQueued, replay.Applied: EventInvalidationReplayed,
		replay.Dropped: EventInvalidationDropped}[e], key)
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
// err, saying what became of the invalidation. A write of key that reaches
// Redis later drops what is queued of it (replay's Superseded): replayed
// after it, it would undo it.
func (c *Cache) invalidateLater(ctx context.Context, key string, err error) error {
	return c.queueOrDrop(ctx, string(queuedKey)+key, key, err)
}

// The queue's entries: a key's invalidation is queuedKey and the key, a
// tag's the kind (epochs.HardTags, SoftTags) and the tag, a Clear's
// epochs.Clear alone.
const queuedKey = 'k'

// pending reports whether key has an invalidation queued.
func (c *Cache) pending(key string) bool {
	return c.queue.Len() > 0 && c.queue.Has(string(queuedKey)+key)
}

// invalidateGroupLater queues a group invalidation (kind, of tags) that
// failed with err, as invalidateLater does a key's: one entry per tag, one
// for a Clear. Until it lands, this process holds what it concerns
// invalidated (epochs' Config.Held).
func (c *Cache) invalidateGroupLater(ctx context.Context, kind epochs.Kind, tags []string, err error) error {
	if kind == epochs.Clear {
		tags = []string{""}
	}
	var out error
	for _, tag := range tags {
		e := c.queueOrDrop(ctx, string(kind)+tag, tag, err)
		if out == nil || !c.queue.Has(string(kind)+tag) {
			out = e // the first tag's answer, unless a later one was dropped
		}
	}
	return out
}

// queueOrDrop queues entry (of key, for the log) after err, and returns
// the caller's error: err, saying what became of it.
func (c *Cache) queueOrDrop(ctx context.Context, entry, key string, err error) error {
	if !queueable(err) || c.ctx.Err() != nil {
		return err
	}
	if c.queue.Invalidate(ctx, entry) { // told Queued, or nothing for one already queued, which does the same
		return errorf("%w (%w)", err, ErrQueued)
	}
	if c.warn.queue.Allow() {
		c.opts.Logger.Warn("corral: the queue of invalidations for Redis is full; this one is dropped, and Redis may serve the old value until its TTL",
			"key", key, "max", c.opts.MaxPendingInvalidations, errAttr(err))
	}
	return errorf("%w (not queued for Redis: %d invalidations wait already)", err, c.opts.MaxPendingInvalidations)
}

// replayed applies a queued invalidation (see queuedKey) to Redis; a
// group's is then applied here too, and counted.
func (c *Cache) replayed(ctx context.Context, entry string, recovery bool) error {
	kind, rest := epochs.Kind(entry[0]), entry[1:]
	if kind == queuedKey {
		return c.store.deleteAs(ctx, wire.NewNames(c.opts.Prefix, rest), recovery)
	}
	var tags []string
	if kind != epochs.Clear {
		tags = []string{rest}
	}
	at := near.Clock()
	mk, err := c.records.MarkAs(ctx, recovery, kind, tags)
	if err == nil {
		c.marked(context.Background(), kind, tags, mk, at)
	}
	return denied(err)
}

// abandon drops what is still queued (told Dropped): Close could not
// apply it.
func (c *Cache) abandon() {
	if keys := c.queue.Abandon(); len(keys) > 0 {
		c.opts.Logger.Warn("corral: Close could not apply the invalidations queued for Redis; Redis may serve the old values until their TTL",
			"count", len(keys), "first", keys[0])
	}
}
