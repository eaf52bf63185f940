package corral

import (
	"context"
	"log/slog"

	"github.com/corralhq/corral/internal/diagnose"
	"github.com/corralhq/corral/internal/warn"
)

// warnings are what a Cache counts and warns of when Redis refuses
// something, or an entry does not decode (internal/warn's Set, which keeps
// the faults Health reports too), rate-limited so that a Redis in trouble
// does not flood the log; and the checks it makes at its first use
// (internal/diagnose's Checks).
type warnings struct {
	*warn.Set
	checks *diagnose.Checks
	log    *slog.Logger  // for queue
	queue  warn.Minutely // invalidations the queue for Redis dropped (queue.go)
}

// initWarnings makes c's warnings, which read through c.store.
func (c *Cache) initWarnings() {
	o, bounded := c.opts, c.tasks.Bounded(c.ctx, c.opts.RedisTimeout)
	set := warn.New(warn.Config{
		Logger: o.Logger, Stats: &c.stats.Counters, Permission: ErrPermission, WriteRefused: ErrWriteRefused,
		Go: bounded, KeyType: c.store.pipe.Type,
	})
	c.warn.Set, c.warn.log = set, o.Logger
	c.warn.checks = diagnose.NewChecks(diagnose.ChecksConfig{
		Logger: o.Logger, Prefix: o.Prefix, NoShard: o.DisableShardedPubSub, Go: bounded,
		PubSub: func(ctx context.Context) (byte, string, error) {
			m, err := c.store.pubsub(ctx)
			return m.Mark, m.Refusal, err
		},
		Rights: c.store.rights, ConfigGet: c.store.pipe.ConfigGet,
		Missing: set.RightMissing, Refused: set.RightDenied,
	})
}

// firstUse starts the check of the rights, once, after a reply from Redis.
func (c *Cache) firstUse() { c.warn.checks.Rights() }

// diagnoseSoon starts the check of the eviction policy, once answered.
func (c *Cache) diagnoseSoon() { c.warn.checks.Policy() }

// decodeFailed counts and warns of an entry of key that did not decode.
func (c *Cache) decodeFailed(key, what string) { c.warn.DecodeFailed(key, what) }

// permissionDenied logs a right denied (ErrPermission) once; Health says so.
func (c *Cache) permissionDenied(err error) { c.warn.PermissionDenied(err) }

// countRedisError counts a failed Redis call, unless it failed because the
// caller's own context ended; a right denied is logged, and is a reply.
func (c *Cache) countRedisError(ctx context.Context, err error) {
	if c.warn.RedisError(ctx, err) {
		c.firstUse()
	}
}
