package corral

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/diagnose"
)

// This file holds the check of the server's eviction policy, made once per
// Cache in the background at its first use (not in New, which must work
// while Redis is down); internal/diagnose judges what it reads. Nothing
// here delays or fails a call.

// policyRetry is how long after a check Redis did not answer the next call
// may try again.
const policyRetry = time.Minute

// diagnoseSoon starts diagnosePolicy in the background, bounded by
// RedisTimeout, at the first call, or at the first call a minute after a
// check Redis did not answer. warn.policyNext is when a check may start
// (Unix ns), or -1 while one runs and once one got an answer.
func (c *Cache) diagnoseSoon() {
	next := c.warn.policyNext.Load()
	if next < 0 || next > 0 && time.Now().UnixNano() < next || !c.warn.policyNext.CompareAndSwap(next, -1) {
		return
	}
	c.tasks.Start(func() { // Close waits for it, up to RedisTimeout
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		if !c.diagnosePolicy(ctx) {
			c.warn.policyNext.Store(time.Now().Add(policyRetry).UnixNano())
		}
	})
}

// diagnosePolicy reads the maxmemory-policy of the server (CONFIG GET),
// or of each master of a Cluster, and warns once when it may evict corral's
// keys (diagnose.WarnPolicies). It reports false when Redis did not answer,
// so the check is tried again later.
func (c *Cache) diagnosePolicy(ctx context.Context) (answered bool) {
	policies, err := c.evictionPolicies(ctx)
	return diagnose.WarnPolicies(c.opts.Logger, policies, err)
}

// evictionPolicies returns the maxmemory-policy of each master of a
// Cluster, by node address, or of the one server (any other client: a
// Sentinel-managed master, for one), under the key "" (store.configGet).
func (c *Cache) evictionPolicies(ctx context.Context) (map[string]string, error) {
	replies, err := c.store.configGet(ctx, "maxmemory-policy")
	if err != nil {
		return nil, err
	}
	policies := make(map[string]string, len(replies))
	for node, conf := range replies {
		p, ok := conf["maxmemory-policy"]
		if !ok {
			return nil, diagnose.ErrNoPolicy
		}
		policies[node] = p
	}
	return policies, nil
}
