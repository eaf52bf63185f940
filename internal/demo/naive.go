package demo

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// naive is plain cache-aside: GET the key; on a miss, query the origin and
// SET the value with a TTL. Every caller that misses queries the origin.
type naive struct{}

func (naive) Name() string { return "naive" }
func (naive) Summary() string {
	return "plain cache-aside: GET; on a miss, query the origin and SET key value EX ttl"
}

func (naive) NewInstance(env Env) (Instance, error) { return &naiveInstance{env: env}, nil }

type naiveInstance struct{ env Env }

func (n *naiveInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	name := n.env.Namespace + key
	v, err := n.env.Redis.Get(ctx, name).Bytes()
	if err == nil {
		return v, nil
	}
	if !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("demo: naive: GET: %w", err)
	}
	v, err = n.env.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := n.env.Redis.Set(ctx, name, v, n.env.TTL).Err(); err != nil {
		return nil, fmt.Errorf("demo: naive: SET: %w", err)
	}
	return v, nil
}

func (n *naiveInstance) UnhookedCommands() uint64 { return 0 }
func (n *naiveInstance) Close() error             { return nil }
