package diagnose

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// ChecksConfig is what a Cache's first-use checks need of it. The reads go
// through the Cache's store: Checks send nothing to Redis themselves.
type ChecksConfig struct {
	Logger  *slog.Logger
	Prefix  string // Options.Prefix
	NoShard bool   // Options.DisableShardedPubSub
	// Go runs f in the background, under a context bounded by
	// RedisTimeout, as a goroutine Close waits for (nothing once closed).
	Go func(f func(ctx context.Context))
	// PubSub learns the pub/sub mode: its mark and, for AnnounceNone,
	// Redis's refusal of the publish.
	PubSub func(ctx context.Context) (mark byte, refusal string, err error)
	// Rights returns Redis's refusals of the commands corral's scripts run
	// (start.lua's trials, or internal/scripts/rights.lua on a key under
	// Prefix), or the error of the script.
	Rights func(ctx context.Context) (refused []string, err error)
	// ConfigGet reads CONFIG GET pattern of each master of a Cluster, by
	// node address, or of the one server, under "" (its maxmemory-policy
	// as start.lua read it by INFO, when it did, without a command).
	ConfigGet func(ctx context.Context, pattern string) (map[string]map[string]string, error)
	// Missing is told the error of Rights (it logs a right denied), and
	// Refused each of Redis's refusals: a right the ACL user lacks.
	Missing func(err error)
	Refused func(msg string)
}

// Checks are the checks a Cache makes at its first use, in the background
// once Redis has answered (New never waits for Redis): of its rights, once,
// and of the server's eviction policy, once answered (again a minute after
// a check Redis did not answer). Nothing here delays or fails a call: a
// missing right is logged once, and the calls that need it return
// ErrPermission (or, for channels, waiters re-check on their own).
type Checks struct {
	cfg        ChecksConfig
	checked    atomic.Bool  // the rights check has started
	policyNext atomic.Int64 // when the eviction policy may be checked (Unix ns), or -1 while one runs and once one got an answer
}

// NewChecks returns the Checks of a Cache, none started.
func NewChecks(cfg ChecksConfig) *Checks { return &Checks{cfg: cfg} }

// PolicyRetry is how long after a check Redis did not answer the next call
// may try again.
const PolicyRetry = time.Minute

// Rights starts CheckRights in the background the first time it is called
// (after the first reply from Redis: a Redis that is down is not checked).
func (c *Checks) Rights() {
	if c.checked.Load() || !c.checked.CompareAndSwap(false, true) {
		return
	}
	c.cfg.Go(c.CheckRights)
}

// CheckRights learns the pub/sub mode, then takes what was refused of each
// command corral's scripts and hit path run, tried in one script on a key
// under Prefix (ACL rules apply inside scripts as outside): the script
// that learnt the mode, or one of its own (Rights). It logs each right the ACL user lacks
// once (Missing, Refused). (A user that may publish but not subscribe is
// not caught here: its waiters' subscriptions are never confirmed, and
// they re-check on their own.)
func (c *Checks) CheckRights(ctx context.Context) {
	mark, refusal, err := c.cfg.PubSub(ctx)
	if err != nil {
		return // Redis is failing: the calls say so
	}
	WarnPubSub(c.cfg.Logger, mark, refusal, c.cfg.Prefix, c.cfg.NoShard)
	refused, err := c.cfg.Rights(ctx)
	if err != nil {
		c.cfg.Missing(err)
		return
	}
	for _, msg := range refused {
		c.cfg.Refused(msg)
	}
}

// Policy starts CheckPolicy in the background at the first call, or at the
// first call PolicyRetry after a check Redis did not answer.
func (c *Checks) Policy() {
	next := c.policyNext.Load()
	if next < 0 || next > 0 && time.Now().UnixNano() < next || !c.policyNext.CompareAndSwap(next, -1) {
		return
	}
	c.cfg.Go(func(ctx context.Context) {
		if !c.CheckPolicy(ctx) {
			c.policyNext.Store(time.Now().Add(PolicyRetry).UnixNano())
		}
	})
}

// CheckPolicy reads the maxmemory-policy of the server (CONFIG GET), or of
// each master of a Cluster, and warns once when it may evict corral's keys
// (WarnPolicies). It reports false when Redis did not answer, so the check
// is tried again later.
func (c *Checks) CheckPolicy(ctx context.Context) (answered bool) {
	policies, err := c.policies(ctx)
	return WarnPolicies(c.cfg.Logger, policies, err)
}

// policies returns the maxmemory-policy of each master of a Cluster, by
// node address, or of the one server (any other client: a Sentinel-managed
// master, for one), under the key "".
func (c *Checks) policies(ctx context.Context) (map[string]string, error) {
	replies, err := c.cfg.ConfigGet(ctx, "maxmemory-policy")
	if err != nil {
		return nil, err
	}
	policies := make(map[string]string, len(replies))
	for node, conf := range replies {
		if policies[node], err = policyIn(conf); err != nil {
			return nil, err
		}
	}
	return policies, nil
}
