package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/recipe"
	gocache "github.com/go-redis/cache/v9"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidisaside"
	"github.com/viccon/sturdyc"
)

// Env is what one app instance of a system works with.
type Env struct {
	// Addr is the Redis server's host:port, for systems that bring their
	// own client (rueidisaside).
	Addr string
	// Dial opens a connection whose commands are counted, in the shape of
	// rueidis.ClientOption.DialCtxFn, for systems that bring their own
	// client. Env.Redis dials through the same count.
	Dial func(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error)
	// Redis is the instance's own go-redis client, connected before the run.
	Redis *redis.Client
	// Namespace starts every key the instance is asked for (Instance.Fetch's
	// keys come with it, and Load takes them so); it is new for every
	// trial, so trials never see each other's data.
	Namespace string
	// TTL is the time to live of cached values.
	TTL time.Duration
	// StaleTTL is corral's stale-while-revalidate window where the scenario
	// uses one (expiry-zipf); other systems have no such setting.
	StaleTTL time.Duration
	// Load queries the origin (metered) for a key as Fetch gets it (with
	// the namespace).
	Load func(ctx context.Context, key string) ([]byte, error)
	// Logger receives the systems' warnings (corral's).
	Logger *slog.Logger
}

// Instance is one app instance of a system. Fetch is called concurrently by
// all of the instance's goroutines.
type Instance interface {
	// Fetch returns key's value from the cache, or from Env.Load. key
	// starts with Env.Namespace: the harness builds the keys before it
	// times the calls, so a hit costs no concatenation of the harness's.
	Fetch(ctx context.Context, key string) ([]byte, error)
	// Close releases what the instance holds, but not Env.Redis.
	Close() error
}

// System is one way of reading through Redis in front of the origin.
type System struct {
	Name string
	// Usage says how the benchmark uses it, for BENCHMARKS.md.
	Usage string
	// Hit says where a hit is answered from, for the hit-path table.
	Hit string
	// NotBuilt, when set, says why the system cannot run at all yet; its
	// rows then say so instead of showing numbers.
	NotBuilt string
	// New makes one app instance.
	New func(env Env) (Instance, error)
	// Cannot, when set, returns why the system cannot run a scenario ("" when
	// it can).
	Cannot func(sc *Scenario) string
}

// notBuilt is the status of a system that does not exist yet.
const notBuilt = "not built yet"

// systems are every system, in the order of the tables.
var systems = []System{
	{
		Name:  "corral",
		Usage: "`corral.New(rdb, &corral.Options{StaleTTL: …})` per instance, as the Quick start (its first peek carries its start-up: no `Cache.Ready`), `Cache.Fetch`; default options (the stale window only in expiry-zipf, as the docs advise for short TTLs)",
		Hit:   "Redis (one HMGET, read in the calling goroutine)",
		New:   newCorral,
	},
	{
		Name:  "corral-near",
		Usage: "corral with its in-process near cache: `Options.NearCache{Size: 100000}` (copies served up to 1 s, kept coherent by Redis's client tracking)",
		Hit:   "in-process near cache",
		New:   newCorralNear,
	},
	{
		Name:  "seed",
		Usage: "the usual recipe (corral's `internal/recipe` Seed, which `corral demo` runs): GET; `SET lock NX EX 10`; the holder loads, SETs and DELs the lock; the others sleep 100 ms and retry",
		Hit:   "Redis (GET)",
		New:   newRecipe(func(env recipe.Env) fetcher { return recipe.Seed{Env: env} }),
	},
	{
		Name:  "naive",
		Usage: "plain cache-aside (corral's `internal/recipe` Naive, which `corral demo` runs): GET; on a miss, load and SET with a TTL",
		Hit:   "Redis (GET)",
		New:   newRecipe(func(env recipe.Env) fetcher { return recipe.Naive{Env: env} }),
	},
	{
		Name:  "rueidisaside",
		Usage: "`rueidisaside.NewClient` (its own rueidis client per instance, client-side caching on, as it requires) and `Get(ctx, ttl, key, fn)`",
		Hit:   "in-process client-side cache (RESP3 tracking)",
		New:   newRueidisAside,
	},
	{
		Name:  "go-redis-cache",
		Usage: "`cache.New(&cache.Options{Redis: rdb})` and `Once` (singleflight per process); without its optional local TinyLFU cache, so hits are Redis hits",
		Hit:   "Redis (GET)",
		New:   newGoRedisCache,
	},
	{
		Name:  "sturdyc",
		Usage: "`sturdyc.New[[]byte]` (in-memory, in-flight tracking) with `WithDistributedStorage` on Redis (GET; SET EX ttl), `GetOrFetch`",
		Hit:   "in-process memory",
		New:   newSturdyc,
	},
	{
		Name:  "redsync",
		Usage: "cache-aside with a redsync mutex (default options: 8 s expiry, 32 tries 50–250 ms apart) around the load: GET; on a miss `LockContext`, GET again, load, SET, `UnlockContext`",
		Hit:   "Redis (GET)",
		New:   newRedsync,
	},
}

// lookupSystem returns the system called name.
func lookupSystem(name string) (System, bool) {
	for _, s := range systems {
		if s.Name == name {
			return s, true
		}
	}
	return System{}, false
}

// status says whether sys can run sc: "" when it can, else why not.
func (s System) status(sc *Scenario) string {
	if s.NotBuilt != "" || s.New == nil {
		return notBuilt
	}
	if s.Cannot != nil {
		if why := s.Cannot(sc); why != "" {
			return "cannot: " + why
		}
	}
	return ""
}

// --- corral ---

type corralInstance struct {
	env   Env
	cache *corral.Cache
	near  bool // the cache has a near cache (warm.go waits for it)
}

func newCorral(env Env) (Instance, error) {
	return makeCorral(env, corral.Options{Logger: env.Logger, StaleTTL: env.StaleTTL}, false)
}

func newCorralNear(env Env) (Instance, error) {
	return makeCorral(env, corral.Options{Logger: env.Logger, StaleTTL: env.StaleTTL,
		NearCache: corral.NearCacheOptions{Size: 100_000}}, true)
}

// makeCorral makes a Cache with opts, as the README's Quick start does:
// New alone. On the harness's server (one server) its first peek carries
// its start-up (the pub/sub mode, the rights, the eviction policy), so the
// Cache sends nothing before its first call, and Cache.Ready, a readiness
// check that costs a command of its own, is not needed.
func makeCorral(env Env, opts corral.Options, near bool) (Instance, error) {
	c, err := corral.New(env.Redis, &opts)
	if err != nil {
		return nil, err
	}
	return &corralInstance{env: env, cache: c, near: near}, nil
}

func (c *corralInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	return c.Bind(key)(ctx)
}

// Bind is Fetch of key with its loader built once, outside the hit path's
// timed loop (binder).
func (c *corralInstance) Bind(key string) func(context.Context) ([]byte, error) {
	load := func(ctx context.Context) ([]byte, error) { return c.env.Load(ctx, key) }
	return func(ctx context.Context) ([]byte, error) { return c.cache.Fetch(ctx, key, c.env.TTL, load) }
}

func (c *corralInstance) Close() error { return c.cache.Close() }

func (c *corralInstance) nearHits() (hits, failSafe uint64, ok bool) {
	s := c.cache.Stats()
	return s.NearHits, s.FailSafeHits, c.near
}

// --- seed and naive, the recipes corral's demo runs ---

// fetcher is a recipe bound to its Env.
type fetcher interface {
	Fetch(ctx context.Context, key string) ([]byte, error)
}

// recipeInstance is an app instance of a recipe: it holds nothing.
type recipeInstance struct{ fetcher }

func (recipeInstance) Close() error { return nil }

// newRecipe adapts one of corral's recipes, so the benchmark runs exactly
// the code `corral demo` runs.
func newRecipe(bind func(recipe.Env) fetcher) func(Env) (Instance, error) {
	return func(env Env) (Instance, error) {
		return recipeInstance{bind(recipe.Env{
			Redis:     env.Redis,
			Namespace: "", // the keys come namespaced
			TTL:       env.TTL,
			Load:      env.Load,
		})}, nil
	}
}

// --- rueidisaside ---

type rueidisAsideInstance struct {
	env    Env
	client rueidisaside.CacheAsideClient
}

func newRueidisAside(env Env) (Instance, error) {
	c, err := rueidisaside.NewClient(rueidisaside.ClientOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{env.Addr}, DialCtxFn: env.Dial},
	})
	if err != nil {
		return nil, err
	}
	return &rueidisAsideInstance{env: env, client: c}, nil
}

func (r *rueidisAsideInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	return r.Bind(key)(ctx)
}

// Bind is Fetch of key with its loader built once (binder).
func (r *rueidisAsideInstance) Bind(key string) func(context.Context) ([]byte, error) {
	load := func(ctx context.Context, _ string) (string, error) {
		b, err := r.env.Load(ctx, key)
		return string(b), err
	}
	return func(ctx context.Context) ([]byte, error) {
		v, err := r.client.Get(ctx, r.env.TTL, key, load)
		if err != nil {
			return nil, err
		}
		return []byte(v), nil
	}
}

func (r *rueidisAsideInstance) Close() error {
	r.client.Close()
	return nil
}

// --- go-redis/cache ---

type goRedisCacheInstance struct {
	env   Env
	cache *gocache.Cache
}

func newGoRedisCache(env Env) (Instance, error) {
	return &goRedisCacheInstance{env: env, cache: gocache.New(&gocache.Options{Redis: env.Redis})}, nil
}

func (g *goRedisCacheInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := g.cache.Once(&gocache.Item{
		Ctx:   ctx,
		Key:   key,
		Value: &v,
		TTL:   g.env.TTL,
		Do: func(*gocache.Item) (any, error) {
			return g.env.Load(ctx, key)
		},
	})
	return v, err
}

func (g *goRedisCacheInstance) Close() error { return nil }

// --- sturdyc with a Redis distributed storage ---

type sturdycInstance struct {
	env   Env
	cache *sturdyc.Client[[]byte]
}

// redisStorage is sturdyc's DistributedStorage on Redis. sturdyc leaves the
// storage's TTL to the user: its records live for the scenario's TTL.
type redisStorage struct {
	rdb *redis.Client
	ttl time.Duration
}

func (s redisStorage) Get(ctx context.Context, key string) ([]byte, bool) {
	b, err := s.rdb.Get(ctx, key).Bytes()
	return b, err == nil
}

func (s redisStorage) Set(ctx context.Context, key string, value []byte) {
	_ = s.rdb.Set(ctx, key, value, s.ttl).Err()
}

func (s redisStorage) GetBatch(ctx context.Context, keys []string) map[string][]byte {
	out := make(map[string][]byte, len(keys))
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return out
	}
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[keys[i]] = []byte(str)
		}
	}
	return out
}

func (s redisStorage) SetBatch(ctx context.Context, records map[string][]byte) {
	pipe := s.rdb.Pipeline()
	for k, v := range records {
		pipe.Set(ctx, k, v, s.ttl)
	}
	_, _ = pipe.Exec(ctx)
}

// Sizes of sturdyc's in-memory cache: room for every key of every scenario.
const (
	sturdycCapacity = 100_000
	sturdycShards   = 64
	sturdycEvictPct = 10
)

func newSturdyc(env Env) (Instance, error) {
	c := sturdyc.New[[]byte](sturdycCapacity, sturdycShards, env.TTL, sturdycEvictPct,
		sturdyc.WithDistributedStorage(redisStorage{rdb: env.Redis, ttl: env.TTL}),
		sturdyc.WithLog(slogAdapter{env.Logger}),
	)
	return &sturdycInstance{env: env, cache: c}, nil
}

func (s *sturdycInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	return s.Bind(key)(ctx)
}

// Bind is Fetch of key with its loader built once (binder).
func (s *sturdycInstance) Bind(key string) func(context.Context) ([]byte, error) {
	load := func(ctx context.Context) ([]byte, error) { return s.env.Load(ctx, key) }
	return func(ctx context.Context) ([]byte, error) { return s.cache.GetOrFetch(ctx, key, load) }
}

func (s *sturdycInstance) Close() error { return nil }

// slogAdapter is sturdyc's Logger on slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Error(msg string, args ...any) { a.l.Error(msg, args...) }
func (a slogAdapter) Warn(msg string, args ...any)  { a.l.Warn(msg, args...) }

// --- redsync around cache-aside ---

type redsyncInstance struct {
	env Env
	rs  *redsync.Redsync
}

func newRedsync(env Env) (Instance, error) {
	return &redsyncInstance{env: env, rs: redsync.New(redsyncgoredis.NewPool(env.Redis))}, nil
}

func (r *redsyncInstance) Fetch(ctx context.Context, key string) ([]byte, error) {
	name := key
	get := func() ([]byte, bool, error) {
		v, err := r.env.Redis.Get(ctx, name).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
	if v, ok, err := get(); ok || err != nil {
		return v, err
	}
	m := r.rs.NewMutex("lock:" + name)
	if err := m.LockContext(ctx); err != nil {
		return nil, fmt.Errorf("redsync: lock %s: %w", name, err)
	}
	defer func() { _, _ = m.UnlockContext(context.WithoutCancel(ctx)) }()
	if v, ok, err := get(); ok || err != nil { // another instance loaded it while we waited
		return v, err
	}
	v, err := r.env.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := r.env.Redis.Set(ctx, name, v, r.env.TTL).Err(); err != nil {
		return nil, err
	}
	return v, nil
}

func (r *redsyncInstance) Close() error { return nil }
