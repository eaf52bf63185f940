package corral

import (
	"context"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/diagnose"
	"github.com/redis/go-redis/v9"
)

// This file holds the check of the server's eviction policy, made once per
// Cache in the background at its first use (not in New, which must work
// while Redis is down); internal/diagnose judges what it reads. Nothing
// here delays or fails a call.

// policyRetry is how long after a check Redis did not answer the next call
// may try again.
const policyRetry = time.Minute

// diagnoseSoon starts checkEvictionPolicy in the background, bounded by
// RedisTimeout, at the first call, or at the first call a minute after a
// check Redis did not answer. warn.policyNext is when a check may start
// (Unix ns), or -1 while one runs and once one got an answer.
func (c *Cache) diagnoseSoon() {
	next := c.warn.policyNext.Load()
	if next < 0 || next > 0 && time.Now().UnixNano() < next || !c.warn.policyNext.CompareAndSwap(next, -1) {
		return
	}
	c.tasks.start(func() { // Close waits for it, up to RedisTimeout
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		if !c.checkEvictionPolicy(ctx) {
			c.warn.policyNext.Store(time.Now().Add(policyRetry).UnixNano())
		}
	})
}

// checkEvictionPolicy reads the maxmemory-policy of the server (CONFIG GET),
// or of each master of a Cluster, and warns once when it may evict corral's
// keys (diagnose.WarnPolicies). It reports false when Redis did not answer,
// so the check is tried again later.
func (c *Cache) checkEvictionPolicy(ctx context.Context) (answered bool) {
	policies, err := c.evictionPoliciesWithin(ctx)
	return diagnose.WarnPolicies(c.opts.Logger, policies, err)
}

// evictionPoliciesWithin is evictionPolicies, returning when ctx ends: the
// client honours context deadlines only with ContextTimeoutEnabled. A call
// it keeps waiting on is left to it, as the pipeline leaves its calls: its
// goroutine ends when the client gives up.
func (c *Cache) evictionPoliciesWithin(ctx context.Context) (map[string]string, error) {
	type result struct {
		policies map[string]string
		err      error
	}
	done := make(chan result, 1)
	go func() {
		p, err := c.evictionPolicies(ctx)
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		return r.policies, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// evictionPolicies returns the maxmemory-policy of each master of a
// Cluster, by node address, or of the one server (any other client: a
// Sentinel-managed master, for one), under the key "".
func (c *Cache) evictionPolicies(ctx context.Context) (map[string]string, error) {
	cluster, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		p, err := diagnose.MaxmemoryPolicy(ctx, c.rdb)
		return map[string]string{"": p}, err
	}
	var mu sync.Mutex
	policies := map[string]string{}
	err := cluster.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		p, err := diagnose.MaxmemoryPolicy(ctx, m)
		mu.Lock()
		defer mu.Unlock()
		policies[m.Options().Addr] = p
		return err
	})
	return policies, err
}
