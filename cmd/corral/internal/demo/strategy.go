package demo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/recipe"
	"github.com/redis/go-redis/v9"
)

// Strategy is one way of reading through a cache in front of the origin.
// It makes one Instance per app instance of a run.
type Strategy interface {
	// Name is the strategy's name in --strategies and in reports.
	Name() string
	// Summary says in one line what the strategy does, for --help.
	Summary() string
	// NewInstance returns the strategy's state for one app instance.
	NewInstance(env Env) (Instance, error)
}

// Instance is one app instance of a strategy. Fetch is called concurrently
// by all of the instance's goroutines.
type Instance interface {
	// Fetch returns key's value, from the cache or from env.Load.
	Fetch(ctx context.Context, key string) ([]byte, error)
	// UnhookedCommands is the number of Redis commands the instance sent
	// where go-redis hooks do not see them (pub/sub connections).
	UnhookedCommands() uint64
	// Close releases what the instance holds, but not env.Redis.
	Close() error
}

// Env is what an Instance works with.
type Env struct {
	// Redis is the instance's own client; the run counts its commands.
	Redis redis.UniversalClient
	// Namespace starts every Redis key the instance uses; it is new for
	// every run and strategy, so runs never see each other's data.
	Namespace string
	// TTL is the time to live of cached values.
	TTL time.Duration
	// StaleTTL is the stale-while-revalidate window of a strategy that has
	// one (corral); the others ignore it.
	StaleTTL time.Duration
	// Load queries the origin for a key (a slow call, metered).
	Load func(ctx context.Context, key string) ([]byte, error)
	// Logger receives warnings; never nil.
	Logger *slog.Logger
}

// recipe is what the recipes (seed, naive) read through.
func (e Env) recipe() recipe.Env {
	return recipe.Env{Redis: e.Redis, Namespace: e.Namespace, TTL: e.TTL, Load: e.Load}
}

// strategies are all strategies, in their default order.
var strategies = []Strategy{naive{}, seedRecipe{}, corralStrategy{}}

// Strategies returns every strategy, in the default order.
func Strategies() []Strategy { return append([]Strategy(nil), strategies...) }

// StrategyNames returns the names of every strategy, in the default order.
func StrategyNames() []string {
	names := make([]string, len(strategies))
	for i, s := range strategies {
		names[i] = s.Name()
	}
	return names
}

// LookupStrategy returns the strategy called name.
func LookupStrategy(name string) (Strategy, error) {
	for _, s := range strategies {
		if s.Name() == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("demo: unknown strategy %q (known: %s)", name, strings.Join(StrategyNames(), ", "))
}
