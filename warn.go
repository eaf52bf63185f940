package corral

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a Cache counts and warns of when Redis refuses something, or an entry
// does not decode. Warnings are rate-limited (once a minute, or once per
// key or message), so that a Redis in trouble does not flood the log.

// warnings are what a Cache warned of, and when, and its first-use checks'
// progress (rights.go, eviction.go).
type warnings struct {
	log *slog.Logger

	// At warn level once a minute at most:
	notice   everyMinute // notices Redis refused to publish
	refused  everyMinute // writes Redis refused
	failOpen everyMinute // fail-open loads (resolve.go)
	store    everyMinute // commits that failed (lease.go)
	release  everyMinute // leases not handed back
	renew    everyMinute // renewals that failed
	foreign  everyMinute // keys of another type at an entry's name
	queue    everyMinute // invalidations the queue for Redis dropped (queue.go)

	// Once per key or message, at most maxWarnedKeys remembered in all:
	large  sync.Map // entry names of values over MaxValueBytes
	decode sync.Map // keys of entries that did not decode
	rights sync.Map // NOPERM messages
	keys   atomic.Int64

	checked    atomic.Bool  // the rights check has started (rights.go)
	policyNext atomic.Int64 // when the eviction policy may be checked (eviction.go)
}

// noticeFailed counts a notice Redis refused to publish, after a write that
// stood (no channel rights: waiters elsewhere fall back to re-checking),
// and warns of it once a minute at most.
func (c *Cache) noticeFailed(err error) {
	c.stats.noticesFailed.Add(1)
	if c.warn.notice.allow() {
		c.opts.Logger.Warn("corral: Redis refused to publish a notice; the write stands, and waiters re-check on their own", errAttr(err))
	}
}

// decodeFailed counts a cached entry of key that did not decode (as what: a
// type, or its payload), and warns of it once per key.
func (c *Cache) decodeFailed(key, what string) {
	c.stats.decodeFailures.Add(1)
	if c.warn.once(&c.warn.decode, key) {
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
	if c.warn.once(&c.warn.rights, what) {
		c.opts.Logger.Error("corral: Redis denies a right corral needs; calls that need it return ErrPermission (see the README's ACL rule)", "err", what)
	}
}

// once reports whether key is new to seen (and records it): a warning
// once per key. seen keeps at most maxWarnedKeys keys; past that every key
// counts as new again, so memory stays bounded.
func (w *warnings) once(seen *sync.Map, key string) bool {
	if _, ok := seen.Load(key); ok {
		return false
	}
	if w.keys.Add(1) > maxWarnedKeys {
		seen.Clear()
		w.keys.Store(0)
	}
	_, loaded := seen.LoadOrStore(key, true)
	return !loaded
}

// maxWarnedKeys bounds the keys remembered for once-per-key warnings.
const maxWarnedKeys = 10000

// refusedWrite counts a write Redis refused while it still serves reads
// (out of memory, a replica), and warns of it once a minute at most.
// why is Redis's reason (OOM, READONLY, or its error text).
func (c *Cache) refusedWrite(why string) {
	c.stats.writesRefused.Add(1)
	c.faults.seen(errorf("%w (%s)", ErrWriteRefused, why))
	if c.warn.refused.allow() {
		c.opts.Logger.Warn("corral: Redis refuses writes; serving what it holds, loading misses directly (kept in memory for FailSafe.Throttle), storing nothing", "why", why)
	}
}

// minutely logs msg at warn level once a minute at most, through e, and
// at debug level otherwise: for what can happen on every call while Redis
// is in trouble.
func (w *warnings) minutely(e *everyMinute, msg string, args ...any) {
	if e.allow() {
		w.log.Warn(msg, args...)
		return
	}
	w.log.Debug(msg, args...)
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
	if !c.warn.foreign.allow() {
		return
	}
	c.tasks.start(func() {
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

// everyMinute lets a warning through once a minute.
type everyMinute struct{ last atomic.Int64 }

func (e *everyMinute) allow() bool {
	now := time.Now().UnixNano()
	last := e.last.Load()
	return now-last >= int64(time.Minute) && e.last.CompareAndSwap(last, now)
}

// countRedisError counts a failed Redis call, unless it failed because the
// caller's own context ended.
func (c *Cache) countRedisError(ctx context.Context, err error) {
	switch {
	case errors.Is(err, ErrPermission):
		c.permissionDenied(err) // Redis answered: it is not failing
		c.firstUse()
	case ctx.Err() == nil:
		c.stats.redisErrors.Add(1)
	}
}
