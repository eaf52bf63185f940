package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/wire"
)

// Get, Set and Delete: an entry read or written directly, without a loader,
// a flight or a lease. A write revokes any lease on its key and tells the
// key's waiters; one that cannot reach Redis is queued for it (queue.go).

// Get returns key's cached value without loading it: fresh or, inside the
// stale window, stale. It returns ErrMiss when there is no entry,
// ErrNotFound when the entry caches a loader's ErrNotFound, and an error
// wrapping ErrCachedFailure while a failure is cached (ErrorTTL).
//
// While Redis cannot be used for the call (refused, silent, the breaker
// open, AUTH refused), Get answers from what this process holds for
// fail-safe use, as Fetch does (Options.FailSafe; Stats.FailSafeHits), and
// fails only when it holds nothing. A key whose Delete or Set is still
// queued for Redis (see Delete) is ErrMiss: this process does not read what
// Redis held before its invalidation.
//
// Other errors: ErrInvalidKey, ErrClosed, ctx.Err(), ErrPermission (an ACL
// right missing), ErrCircuitOpen and ErrRedisTimeout (Redis failing), each
// wrapped with context.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, error) {
	if err := c.validate(ctx, key, nil, false); err != nil {
		return nil, err
	}
	if c.pending(key) {
		return nil, ErrMiss // invalidated here, and Redis has not heard yet (queue.go)
	}
	v, r, ok, err := c.store.get(ctx, wire.NewNames(c.opts.Prefix, key))
	if ok && err == nil {
		var verdict epochs.Verdict
		if verdict, err = c.judge(ctx, r.Born, r.Tags); verdict == epochs.Hard || verdict == epochs.Soft && !r.Window {
			ok = false // invalidated (groups.go): no entry; a soft invalidation leaves one with a stale window, stale
		}
	}
	switch {
	case err != nil:
		c.countRedisError(ctx, err)
		if redisFailed(err) && ctx.Err() == nil {
			if a, held := c.failSafe(key); held {
				return a.val, a.err // not a call: Stats count none of Get's answers
			}
		}
		return nil, err
	}
	c.firstUse()
	if !ok {
		return nil, ErrMiss
	}
	return entryAnswer(v, r.Flags.Kind)
}

// entryAnswer is what a cached entry answers: its value, ErrNotFound, or its
// cached failure.
func entryAnswer(v []byte, kind wire.Kind) ([]byte, error) {
	switch kind {
	case wire.NotFound:
		return nil, ErrNotFound
	case wire.Failure:
		return nil, errorf("%w: %s", ErrCachedFailure, bareText(string(v)))
	}
	return v, nil
}

// Set stores value under key for ttl (the soft TTL, spread by Jitter; the
// entry lives StaleTTL longer). It revokes any lease on key, so a load that
// started before Set can never overwrite value, and wakes the waiters.
// A nil or empty value is a real value.
//
// Errors: ErrInvalidKey, ErrInvalidTTL, ErrValueTooLarge (over
// MaxValueBytes), ErrClosed, ErrWriteRefused (Redis out of memory, or a
// replica), ErrPermission (an ACL right missing), ErrCircuitOpen and
// ErrRedisTimeout (Redis failing), each wrapped with context. A notice Redis
// refused to publish does not fail Set: the write stood
// (Stats.NoticesFailed counts it).
func (c *Cache) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return c.set(ctx, key, value, c.freshness(ttl), refuse.TTL(ttl))
}

// set is Set, and SetEntry, of value with freshness fr; ttlErr is the
// refusal of its TTL, or nil.
func (c *Cache) set(ctx context.Context, key string, value []byte, fr freshness, ttlErr error) error {
	if err := c.validate(ctx, key, ttlErr, false); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	if len(value) > c.opts.MaxValueBytes {
		return errorf("%w: %d bytes, MaxValueBytes is %d", ErrValueTooLarge, len(value), c.opts.MaxValueBytes)
	}
	w := c.entry(value, wire.Value, fr, 0)
	w.born = c.groups.BornAt(ctx, 0)
	err := c.tagged(ctx, w)
	if err == nil {
		_, err = c.store.commit(ctx, wire.NewNames(c.opts.Prefix, key), "", w)
	}
	c.detach(key)
	if err != nil {
		if !errors.Is(err, ErrWriteRefused) {
			c.countRedisError(ctx, err)
		}
		return c.invalidateLater(ctx, key, err) // applied as a Delete: a newer value may come meanwhile
	}
	c.firstUse()
	c.queue.Superseded(ctx, string(queuedKey)+key)
	return nil
}

// Delete invalidates key: it removes the entry, revokes any lease (a load
// that started before Delete can never store its result afterwards) and
// tells waiters to re-check. Deleting a missing key is not an error; the
// errors are those of Set, but ErrInvalidTTL and ErrValueTooLarge.
func (c *Cache) Delete(ctx context.Context, key string) error {
	if err := c.validate(ctx, key, nil, false); err != nil {
		return err
	}
	err := c.store.delete(ctx, wire.NewNames(c.opts.Prefix, key))
	c.detach(key)
	switch {
	case errors.Is(err, ErrWriteRefused):
		c.warn.RefusedWrite(err.Error())
	case err != nil:
		c.countRedisError(ctx, err)
	default:
		c.firstUse()
		c.queue.Superseded(ctx, string(queuedKey)+key)
		return nil
	}
	return c.invalidateLater(ctx, key, err)
}

// detach makes calls that start after a Delete or Set of key start a flight
// of their own rather than join one that began before the write (and would
// answer with what was there before it). The detached flight still answers
// its callers.
func (c *Cache) detach(key string) {
	c.flights.Detach(key)
	c.peeks.Detach(key)
	c.batchPeeks.Detach(key)
	if c.near != nil {
		c.near.Invalidate(key) // at once here; other processes hear of it from Redis
	}
	c.forget(key)
}
