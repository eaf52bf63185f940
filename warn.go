package corral

import (
	"context"

	"github.com/corralhq/corral/internal/diagnose"
	"github.com/corralhq/corral/internal/warn"
	"github.com/corralhq/corral/internal/wire"
)

// warnings are what a Cache counts and warns of when Redis refuses
// something, or an entry does not decode (internal/warn's Set, which keeps
// the faults Health reports too), rate-limited so that a Redis in trouble
// does not flood the log; and the checks it makes at its first use
// (internal/diagnose's Checks).
type warnings struct {
	*warn.Set
	checks *diagnose.Checks
	queue  warn.Minutely // invalidations the queue for Redis dropped (queue.go)
}

// initWarnings makes c's warnings, which read through c.store.
func (c *Cache) initWarnings() {
	o, bounded := c.opts, c.tasks.Bounded(c.ctx, c.opts.RedisTimeout)
	set := warn.New(warn.Config{
		Logger: o.Logger, Stats: &c.stats.Counters, Permission: ErrPermission, WriteRefused: ErrWriteRefused,
		Go: bounded, KeyType: c.store.pipe.Type,
	})
	c.warn.Set = set
	c.warn.checks = diagnose.NewChecks(diagnose.ChecksConfig{
		Logger: o.Logger, Prefix: o.Prefix, NoShard: o.DisableShardedPubSub, Go: bounded,
		PubSub: func(ctx context.Context) (byte, string, error) {
			m, err := c.store.pubsub(ctx)
			return m.Mark, m.Refusal, err
		},
		Rights: c.store.rights, ConfigGet: c.store.start.ConfigGet,
		Missing: set.RightMissing, Refused: set.RightDenied,
	})
}

// firstUse starts, after a reply from Redis, the check of the rights, once,
// and of the eviction policy, once answered. After a reply: on one server,
// a Cache's first peek carries what both read (firstPeek), so a check
// started before it would send a command of its own.
func (c *Cache) firstUse() {
	c.warn.checks.Rights()
	c.warn.checks.Policy()
}

// countRedisError counts a failed Redis call, unless it failed because the
// caller's own context ended; a right denied is logged, and is a reply.
func (c *Cache) countRedisError(ctx context.Context, err error) {
	if c.warn.RedisError(ctx, err) {
		c.firstUse()
	}
}

// Health returns nil while this Cache can use Redis as it needs, and
// otherwise why not, as an error to match with errors.Is:
//
//   - ErrCircuitOpen, wrapping the cause, while a node's circuit breaker is
//     open: Redis refuses connections (the connection's error), is silent
//     (ErrRedisTimeout), refuses the client's credentials (Redis's
//     WRONGPASS or NOAUTH reply), or kept failing. Calls are then answered
//     from memory or fail open (Options.FailSafe).
//   - ErrPermission, wrapping Redis's NOPERM reply, when a call met a right
//     the ACL user lacks in the last 10 s: the calls that need it fail.
//   - ErrWriteRefused, naming OOM or READONLY, when Redis refused a write
//     in the last 10 s: hits are served, nothing is stored.
//
// It asks nothing of Redis: it says what the Cache's own calls met, so it
// costs nothing to call often (a health check). A Cache that has made no
// call yet is healthy.
func (c *Cache) Health() error {
	if err := c.store.pipe.OpenErr(); err != nil {
		return err
	}
	return c.warn.Recent()
}

// skipped returns the error of a call of key while its node is tripped, so
// that the call skips Redis without a round through the pipeline; nil
// otherwise (when no node is tripped, at the cost of one atomic load).
func (c *Cache) skipped(key string) error {
	if !c.store.pipe.Tripping() {
		return nil // before the name, which allocates: this is every call's
	}
	return c.store.pipe.Tripped(wire.EntryName(c.opts.Prefix, key))
}
