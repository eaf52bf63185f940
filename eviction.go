package corral

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds the check of the server's eviction policy, made once per
// Cache in the background at its first use (not in New, which must work
// while Redis is down). Nothing here delays or fails a call.
//
// Under maxmemory, Redis evicts keys as its maxmemory-policy says. corral's
// leases and entries all have a TTL, so every volatile-* policy may evict
// them as well as every allkeys-* policy; volatile-ttl evicts leases first,
// having the shortest TTLs. An evicted lease is not a revoked one (see
// commit.lua): its load still commits, and at most one extra load runs per
// eviction (a caller that finds the lease missing takes it and loads). An
// evicted entry is a miss. Only noeviction evicts nothing: a full Redis then
// refuses writes instead, which corral handles by serving what it holds and
// loading misses directly (ErrWriteRefused).

// evictionRisk is what a policy that evicts costs, as the Cache's warning
// and Check's say it.
const evictionRisk = "a lease evicted during its load costs at most one extra load per eviction, " +
	"an evicted entry is a miss, and an evicted Delete's or Set's revocation marker lets a load begun before it " +
	"store its older value after it; noeviction evicts nothing (README: Eviction policy)"

// policyRetry is how long after a check Redis did not answer the next call
// may try again.
const policyRetry = time.Minute

// checkPolicySoon starts checkEvictionPolicy in the background, bounded by
// RedisTimeout, at the first call, or at the first call a minute after a
// check Redis did not answer. policyNext is when a check may start (Unix
// ns), or -1 while one runs and once one got an answer.
func (c *Cache) checkPolicySoon() {
	next := c.policyNext.Load()
	if next < 0 || next > 0 && time.Now().UnixNano() < next || !c.policyNext.CompareAndSwap(next, -1) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.wg.Add(1) // Close waits for it, up to RedisTimeout
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		if !c.checkEvictionPolicy(ctx) {
			c.policyNext.Store(time.Now().Add(policyRetry).UnixNano())
		}
	}()
}

// checkEvictionPolicy reads the maxmemory-policy of the server (CONFIG GET),
// or of each master of a Cluster, and warns once when it may evict corral's
// keys. A user without the right to CONFIG GET (NOPERM, or the command
// renamed away, as managed services do) is told once that the policy could
// not be read, and why. It reports false when Redis did not answer, so the
// check is tried again later. maxmemory is not read: 0 (no limit) evicts
// nothing today, but CONFIG SET may set it at any time, so the policy
// alone decides.
func (c *Cache) checkEvictionPolicy(ctx context.Context) (answered bool) {
	policies, err := c.evictionPolicies(ctx)
	var reply redis.Error
	switch {
	case err != nil && !errors.As(err, &reply) && !errors.Is(err, errNoPolicy):
		return false // unreachable, or silent: the calls say so
	case err != nil:
		c.opts.Logger.Info("corral: could not read Redis's maxmemory-policy (CONFIG GET) to learn whether it evicts keys; "+
			"a policy that does costs at most one extra load per evicted lease, and a miss per evicted entry", errAttr(err))
		return true
	}
	var evicting []string
	for node, p := range policies {
		switch {
		case !evicts(p):
		case node == "":
			evicting = append(evicting, p)
		default:
			evicting = append(evicting, node+"="+p)
		}
	}
	if len(evicting) > 0 {
		sort.Strings(evicting)
		c.opts.Logger.Warn("corral: Redis may evict corral's keys (its maxmemory-policy is not noeviction): "+evictionRisk,
			"maxmemory-policy", strings.Join(evicting, " "))
	}
	return true
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
			return nil, errNoPolicy
		}
		policies[node] = p
	}
	return policies, nil
}

// maxmemoryPolicy returns the server's maxmemory-policy, or errNoPolicy
// when it answers without it (a proxy, say).
func maxmemoryPolicy(ctx context.Context, rdb redis.Cmdable) (string, error) {
	m, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", err
	}
	p, ok := m["maxmemory-policy"]
	if !ok {
		return "", errNoPolicy
	}
	return p, nil
}

// evicts reports whether maxmemory-policy p may evict corral's keys: every
// policy but noeviction, volatile-* ones too, since all of corral's keys
// have a TTL.
func evicts(p string) bool { return p != "noeviction" }

// errNoPolicy is the error of a CONFIG GET whose answer lacks the policy.
var errNoPolicy = errors.New("corral: CONFIG GET maxmemory-policy answered without it")
