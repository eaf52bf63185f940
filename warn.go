package corral

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/corralhq/corral/internal/warn"
	"github.com/redis/go-redis/v9"
)

// What a Cache counts and warns of when Redis refuses something, or an entry
// does not decode. Warnings are rate-limited (once a minute, or once per
// key or message: internal/warn's bookkeeping), so that a Redis in trouble
// does not flood the log.

// warnings are what a Cache warned of, and when, and its first-use checks'
// progress (rights.go, eviction.go).
type warnings struct {
	log *slog.Logger

	// At warn level once a minute at most:
	notice   warn.Minutely // notices Redis refused to publish
	refused  warn.Minutely // writes Redis refused
	failOpen warn.Minutely // fail-open loads (resolve.go)
	store    warn.Minutely // commits that failed (lease.go)
	release  warn.Minutely // leases not handed back
	renew    warn.Minutely // renewals that failed
	foreign  warn.Minutely // keys of another type at an entry's name
	queue    warn.Minutely // invalidations the queue for Redis dropped (queue.go)

	// Once per key or message, at most warn.MaxKeys remembered in all:
	large  sync.Map // entry names of values over MaxValueBytes
	decode sync.Map // keys of entries that did not decode
	rights sync.Map // NOPERM messages
	keys   warn.Keys

	checked    atomic.Bool  // the rights check has started (rights.go)
	policyNext atomic.Int64 // when the eviction policy may be checked (eviction.go)
}

// noticeFailed counts a notice Redis refused to publish, after a write that
// stood (no channel rights: waiters elsewhere fall back to re-checking),
// and warns of it once a minute at most.
func (c *Cache) noticeFailed(err error) {
	c.stats.NoticesFailed.Add(1)
	if c.warn.notice.Allow() {
		c.opts.Logger.Warn("corral: Redis refused to publish a notice; the write stands, and waiters re-check on their own", errAttr(err))
	}
}

// decodeFailed counts a cached entry of key that did not decode (as what: a
// type, or its payload), and warns of it once per key.
func (c *Cache) decodeFailed(key, what string) {
	c.stats.DecodeFailures.Add(1)
	if c.warn.keys.Once(&c.warn.decode, key) {
		c.opts.Logger.Warn("corral: a cached entry does not decode; reloading it", "key", key, "as", what)
	}
}

// permissionDenied logs a right the ACL user lacks (err wraps
// ErrPermission and Redis's NOPERM text, which names it), once per right.
func (c *Cache) permissionDenied(err error) {
	c.faults.seen(err)
	var reply redis.Error
	what := err.Error()
	if errors.As(err, &reply) {
		what = reply.Error()
	}
	c.rightDenied(what)
}

// rightDenied logs Redis's message denying a right, once per message.
func (c *Cache) rightDenied(what string) {
	// Redis appends where in a script an error was raised: not part of
	// which right is missing.
	what, _, _ = strings.Cut(what, " script: ")
	if c.warn.keys.Once(&c.warn.rights, what) {
		c.opts.Logger.Error("corral: Redis denies a right corral needs; calls that need it return ErrPermission (see the README's ACL rule)", "err", what)
	}
}

// refusedWrite counts a write Redis refused while it still serves reads
// (out of memory, a replica), and warns of it once a minute at most.
// why is Redis's reason (OOM, READONLY, or its error text).
func (c *Cache) refusedWrite(why string) {
	c.stats.WritesRefused.Add(1)
	c.faults.seen(errorf("%w (%s)", ErrWriteRefused, why))
	if c.warn.refused.Allow() {
		c.opts.Logger.Warn("corral: Redis refuses writes; serving what it holds, loading misses directly (kept in memory for FailSafe.Throttle), storing nothing", "why", why)
	}
}

// isWrongType reports whether err is Redis's WRONGTYPE reply: a key of
// another type is at the name.
func isWrongType(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE")
}

// foreignKey warns, once a minute, that a key of another type than
// corral's hashes is at key's entry name (another program's key, or a
// prefix clash): corral takes it for no entry, and the next commit of key
// replaces it. The type is read apart (TYPE), in the background.
func (c *Cache) foreignKey(key, name string) {
	if !c.warn.foreign.Allow() {
		return
	}
	c.tasks.Start(func() {
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		kind, err := c.store.keyType(ctx, name)
		switch {
		case err != nil:
			kind = "unknown (" + err.Error() + ")"
		case kind == "hash" || kind == "none": // replaced or gone by now: the load that followed committed
			kind = "not a hash (replaced since)"
		}
		c.opts.Logger.Warn("corral: a key of another type is at an entry's name (another program's key, or a prefix clash): "+
			"it is taken as no entry, and the next load or Set of the key replaces it", "key", key, "name", name, "type", kind)
	})
}

// countRedisError counts a failed Redis call, unless it failed because the
// caller's own context ended.
func (c *Cache) countRedisError(ctx context.Context, err error) {
	switch {
	case errors.Is(err, ErrPermission):
		c.permissionDenied(err) // Redis answered: it is not failing
		c.firstUse()
	case ctx.Err() == nil:
		c.stats.RedisErrors.Add(1)
	}
}
