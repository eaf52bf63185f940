// Package recipe holds the two ways of reading through Redis that corral is
// measured against, reproduced faithfully with their flaws: plain
// cache-aside (Naive) and the usual lock recipe (Seed). `corral demo` runs
// them beside corral, and the bench module beside corral and its peers, so
// both measure the same code. They need nothing but go-redis.
//
// Their errors start with "demo: ", as `corral demo` has always printed
// them.
package recipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Env is what a recipe reads through.
type Env struct {
	// Redis is the client the recipe sends its commands on.
	Redis redis.UniversalClient
	// Namespace starts every Redis key the recipe uses ("" when the keys
	// come namespaced).
	Namespace string
	// TTL is the time to live of cached values.
	TTL time.Duration
	// Load queries the origin for a key (without the namespace).
	Load func(ctx context.Context, key string) ([]byte, error)
}

// Naive is plain cache-aside: GET the key; on a miss, query the origin and
// SET the value with a TTL. Every caller that misses queries the origin.
type Naive struct{ Env }

// Fetch returns key's value, from Redis or from the origin.
func (n Naive) Fetch(ctx context.Context, key string) ([]byte, error) {
	name := n.Namespace + key
	v, err := n.Redis.Get(ctx, name).Bytes()
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("demo: naive: GET: %w", err)
	}
	v, err = n.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := n.Redis.Set(ctx, name, v, n.TTL).Err(); err != nil {
		return nil, fmt.Errorf("demo: naive: SET: %w", err)
	}
	return v, nil
}

// Seed is the recipe everybody starts from:
//
//	GET key; if it is there, return it
//	SET lock:key 1 NX EX 10
//	if taken: query the origin, SET key value EX ttl, DEL lock:key, return
//	else: sleep 100 ms and start again from the top
//
// Its flaws, left in on purpose: no re-check after taking the lock (a
// caller that missed just before the holder's DEL loads again), a fixed
// 100 ms poll (latency in steps of 100 ms, and Redis commands that grow with
// waiters x origin time / 100 ms), a plain DEL that can delete another
// holder's lock, unbounded recursion (bounded here only by the caller's
// context, so a run cannot hang), an empty value taken for a miss, and a
// 10 s lock a slow load outlives.
type Seed struct{ Env }

// Parameters of the recipe.
const (
	seedLockTTL = 10 * time.Second
	seedPoll    = 100 * time.Millisecond
)

// Fetch returns key's value, from Redis or from the origin once it holds
// the lock; it polls until ctx ends while another caller holds it.
func (s Seed) Fetch(ctx context.Context, key string) ([]byte, error) {
	name := s.Namespace + key
	lock := "lock:" + name
	v, err := s.Redis.Get(ctx, name).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("demo: seed: GET: %w", err)
	}
	if len(v) > 0 { // the recipe's `if value:` takes an empty value for a miss
		return v, nil
	}
	ok, err := s.Redis.SetNX(ctx, lock, 1, seedLockTTL).Result()
	if err != nil {
		return nil, fmt.Errorf("demo: seed: SET NX: %w", err)
	}
	if ok {
		v, err := s.Load(ctx, key)
		if err != nil {
			return nil, err // the lock stays until it expires, as in the recipe
		}
		if err := s.Redis.Set(ctx, name, v, s.TTL).Err(); err != nil {
			return nil, fmt.Errorf("demo: seed: SET: %w", err)
		}
		if err := s.Redis.Del(ctx, lock).Err(); err != nil {
			return nil, fmt.Errorf("demo: seed: DEL: %w", err)
		}
		return v, nil
	}
	t := time.NewTimer(seedPoll)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return nil, fmt.Errorf("demo: seed: gave up polling for %s: %w", key, ctx.Err())
	}
	return s.Fetch(ctx, key)
}
