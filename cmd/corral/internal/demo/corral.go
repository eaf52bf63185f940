package demo

import (
	"context"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/errprefix"
)

// corralStrategy reads through a corral.Cache: one Cache per app instance,
// each on the instance's own client, with corral's default options plus
// Env.StaleTTL as the stale-while-revalidate window (without one, corral
// refreshes early, by XFetch).
type corralStrategy struct{}

func (corralStrategy) Name() string { return "corral" }
func (corralStrategy) Summary() string {
	return "corral.Cache.Fetch: one load per key across all instances; waiters woken by pub/sub"
}

func (corralStrategy) NewInstance(env Env) (Instance, error) {
	c, err := corral.New(env.Redis, &corral.Options{Logger: env.Logger, StaleTTL: env.StaleTTL})
	if err != nil {
		return nil, errprefix.Wrapf("corral: ", "demo: the corral strategy: %w", err) // says corral: once, in main
	}
	// As the Quick start: New alone. Its first peek carries its start-up
	// (on one server), so it sends nothing before the run.
	return &corralInstance{env: env, cache: c}, nil
}

type corralInstance struct {
	env   Env
	cache *corral.Cache
}

func (c *corralInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	return c.cache.Fetch(ctx, c.env.Namespace+key, c.env.TTL, func(ctx context.Context) ([]byte, error) {
		return c.env.Load(ctx, key)
	})
}

// UnhookedCommands counts the SUBSCRIBE/SSUBSCRIBE and UNSUBSCRIBE commands
// corral sent on its pub/sub connection.
func (c *corralInstance) UnhookedCommands() uint64 {
	s := c.cache.Stats()
	return s.Subscribes + s.Unsubscribes
}

func (c *corralInstance) Close() error { return c.cache.Close() }
