package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// seedRecipe is the recipe everybody starts from, reproduced faithfully with
// all its flaws:
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
// holder's lock, unbounded recursion (bounded here only by the run's
// context, so the demo cannot hang), an empty value taken for a miss, and a
// 10 s lock a slow load outlives.
type seedRecipe struct{}

func (seedRecipe) Name() string { return "seed" }
func (seedRecipe) Summary() string {
	return "the usual recipe: GET; SET lock:key NX EX 10; the holder loads, SETs and DELs the lock; others sleep 100ms and retry"
}

func (seedRecipe) NewInstance(env Env) (Instance, error) { return &seedInstance{env: env}, nil }

// Parameters of the recipe.
const (
	seedLockTTL = 10 * time.Second
	seedPoll    = 100 * time.Millisecond
)

type seedInstance struct{ env Env }

func (s *seedInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	name := s.env.Namespace + key
	lock := "lock:" + name
	v, err := s.env.Redis.Get(ctx, name).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("demo: seed: GET: %w", err)
	}
	if len(v) > 0 { // the recipe's `if value:` takes an empty value for a miss
		return v, nil
	}
	ok, err := s.env.Redis.SetNX(ctx, lock, 1, seedLockTTL).Result()
	if err != nil {
		return nil, fmt.Errorf("demo: seed: SET NX: %w", err)
	}
	if ok {
		v, err := s.env.Load(ctx, key)
		if err != nil {
			return nil, err // the lock stays until it expires, as in the recipe
		}
		if err := s.env.Redis.Set(ctx, name, v, s.env.TTL).Err(); err != nil {
			return nil, fmt.Errorf("demo: seed: SET: %w", err)
		}
		if err := s.env.Redis.Del(ctx, lock).Err(); err != nil {
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

func (s *seedInstance) UnhookedCommands() uint64 { return 0 }
func (s *seedInstance) Close() error             { return nil }
