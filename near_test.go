package corral_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// nearOpts turns the near cache on, with a TTL long enough that only
// invalidations can explain a copy going away within a test.
func nearOpts() *corral.Options {
	return &corral.Options{NearCache: corral.NearCacheOptions{Size: 1000, TTL: time.Minute}}
}

// warmNear fetches key on c until it is served from memory: the
// invalidation stream is up and a copy is held.
func warmNear(t *testing.T, c *corral.Cache, key string, load func(context.Context) ([]byte, error)) {
	t.Helper()
	ctx := context.Background()
	before := c.Stats().NearHits
	eventually(t, 10*time.Second, "a near hit of "+key, func() bool {
		if _, err := c.Fetch(ctx, key, time.Hour, load); err != nil && !errors.Is(err, corral.ErrNotFound) {
			t.Fatal(err)
		}
		return c.Stats().NearHits > before
	})
}

// settleNear returns once c has applied every invalidation Redis sent it
// before now. A copy warmNear saw as a hit can still be dropped later by the
// late invalidation of a write made before it was read (the first load's
// commit: the invalidation travels on another connection than the read).
// Redis sends a client its invalidations in order, so once the one of a
// barrier key deleted now has dropped c's copy of it, every earlier one has
// been applied; warming the keys again then holds their copies. admin is a
// client of the same server.
func settleNear(t *testing.T, c *corral.Cache, admin *redis.Client) {
	t.Helper()
	const barrier = "{near-barrier}"
	ctx := context.Background()
	warmNear(t, c, barrier, value("b"))
	if err := admin.Del(ctx, "corral:e:"+barrier+":"+barrier).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the barrier's invalidation", func() bool {
		before := c.Stats().NearHits
		if _, err := c.Fetch(ctx, barrier, time.Hour, value("b")); err != nil {
			t.Fatal(err)
		}
		return c.Stats().NearHits == before
	})
}

// warmNearSettled warms c's copies of keys, lets every invalidation already
// sent reach c (settleNear), and warms them again: the copies then stay
// until something changes them, or they expire.
func warmNearSettled(t *testing.T, c *corral.Cache, admin *redis.Client, load func(key string) func(context.Context) ([]byte, error), keys ...string) {
	t.Helper()
	for _, k := range keys {
		warmNear(t, c, k, load(k))
	}
	settleNear(t, c, admin)
	for _, k := range keys {
		warmNear(t, c, k, load(k))
	}
}

// A near hit sends nothing to Redis.
func TestNearCache_HitsFromMemory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rdb, hook := e.faultyClient()
	c := newCache(t, rdb, nearOpts())
	ctx := context.Background()
	warmNear(t, c, "k", value("v"))
	before, hits := hook.commands.Load(), c.Stats().NearHits
	for range 100 {
		if v, err := c.Fetch(ctx, "k", time.Hour, value("not me")); err != nil || string(v) != "v" {
			t.Fatalf("Fetch = %q, %v", v, err)
		}
	}
	if sent, n := hook.commands.Load()-before, c.Stats().NearHits-hits; sent != 0 || n != 100 {
		t.Fatalf("100 near hits: %d near hits, %d Redis commands; want 100 and 0", n, sent)
	}
	// Not found is kept too, up to its negative TTL.
	warmNear(t, c, "gone", func(context.Context) ([]byte, error) { return nil, corral.ErrNotFound })
	if _, err := c.Fetch(ctx, "gone", time.Hour, value("not me")); !errors.Is(err, corral.ErrNotFound) {
		t.Fatalf("near negative hit = %v; want ErrNotFound", err)
	}
}

// Every change to an entry, by corral in another process or by hand,
// drops the copies of every process at once (well within the minute of
// NearCache.TTL here).
func TestNearCache_Coherent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := newCache(t, e.srv.Client(), nearOpts())
	b := newCache(t, e.srv.Client(), nearOpts())
	ctx := context.Background()
	changes := []struct {
		name   string
		change func(key string)
		want   string // what a Fetch then returns (its loader returns "reloaded")
	}{
		{"Set in another process", func(k string) { b.Set(ctx, k, []byte("set"), time.Hour) }, "set"},
		{"Delete in another process", func(k string) { b.Delete(ctx, k) }, "reloaded"},
		{"a commit in another process", func(k string) {
			b.Delete(ctx, k)
			b.Fetch(ctx, k, time.Hour, value("committed"))
		}, "committed"},
		{"DEL by hand", func(k string) { e.rdb.Del(ctx, entryName(k)) }, "reloaded"},
		{"HSET by hand", func(k string) { e.rdb.HSet(ctx, entryName(k), "v", "by hand") }, "by hand"},
		{"FLUSHDB", func(string) { e.rdb.FlushDB(ctx) }, "reloaded"},
	}
	for i, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			key := fmt.Sprintf("{near%d}", i)
			warmNear(t, a, key, value("old"))
			ch.change(key)
			eventually(t, 5*time.Second, "the copy is dropped", func() bool {
				v, err := a.Fetch(ctx, key, time.Hour, value("reloaded"))
				return err == nil && string(v) == ch.want
			})
		})
	}
}

// When the invalidation stream breaks (its connection killed, Redis
// restarted), copies are dropped and none is served until it is back.
func TestNearCache_StreamBreaks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	c := newCache(t, srv.Client(), nearOpts())
	ctx := context.Background()
	for _, how := range []string{"pub/sub connections killed", "Redis restarted"} {
		t.Run(how, func(t *testing.T) {
			warmNear(t, c, "k", value("old"))
			if how == "Redis restarted" {
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
			} else {
				admin.ClientKillByFilter(ctx, "TYPE", "pubsub")
			}
			// The restarted Redis is empty, and a change made while the
			// stream was down must not leave an old copy behind.
			admin.HSet(ctx, entryName("k"), "v", "new", "s", time.Now().Add(time.Hour).UnixMilli(), "d", "1", "f", "")
			eventually(t, 10*time.Second, "the old copy is gone", func() bool {
				v, err := c.Fetch(ctx, "k", time.Hour, value("reloaded"))
				return err == nil && string(v) != "old"
			})
			warmNear(t, c, "k", value("reloaded")) // and the near cache works again
		})
	}
}

// countingCodec counts decodes.
type countingCodec struct{ decodes atomic.Int32 }

func (c *countingCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
func (c *countingCodec) Unmarshal(b []byte, v any) error {
	c.decodes.Add(1)
	return json.Unmarshal(b, v)
}

// A Fetch[T] near hit returns the decoded value without decoding again;
// copies are kept per type.
func TestNearCache_Typed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	codec := &countingCodec{}
	opts := nearOpts()
	opts.Codec = codec
	c := newCache(t, e.srv.Client(), opts)
	ctx := context.Background()
	type user struct{ Name string }
	load := func(context.Context) (user, error) { return user{"ada"}, nil }
	eventually(t, 10*time.Second, "a near hit", func() bool {
		before := c.Stats().NearHits
		if u, err := corral.Fetch(ctx, c, "u", time.Hour, load); err != nil || u.Name != "ada" {
			t.Fatalf("Fetch = %+v, %v", u, err)
		}
		return c.Stats().NearHits > before
	})
	decodes := codec.decodes.Load()
	for range 10 {
		if u, err := corral.Fetch(ctx, c, "u", time.Hour, load); err != nil || u.Name != "ada" {
			t.Fatalf("Fetch = %+v, %v", u, err)
		}
	}
	if n := codec.decodes.Load() - decodes; n != 0 {
		t.Fatalf("10 near hits decoded %d times; want 0", n)
	}
	// The same key as another type is a copy of its own; both are dropped
	// by one change.
	type name struct{ Name string }
	if v, err := corral.Fetch(ctx, c, "u", time.Hour, func(context.Context) (name, error) { return name{}, nil }); err != nil || v.Name != "ada" {
		t.Fatalf("Fetch as another type = %+v, %v", v, err)
	}
	other := newCache(t, e.srv.Client(), nil)
	b, _ := json.Marshal(user{"grace"})
	if err := other.Set(ctx, "u", b, time.Hour); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "both copies are dropped", func() bool {
		u, _ := corral.Fetch(ctx, c, "u", time.Hour, load)
		n, _ := corral.Fetch(ctx, c, "u", time.Hour, func(context.Context) (name, error) { return name{}, nil })
		return u.Name == "grace" && n.Name == "grace"
	})
}

// entryName is the Redis name of key's entry under the default prefix.
func entryName(key string) string { return wire.NewNames("corral", key).Entry }

var _ = redis.Nil

// Stale-while-revalidate with a near cache: past its soft expiry a copy is
// not served from memory; Redis serves the stale value at once while one
// caller refreshes it, and the refreshed value reaches the near cache.
func TestNearCache_StaleWhileRevalidate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	opts := nearOpts()
	opts.StaleTTL, opts.DisableJitter = time.Minute, true
	c := newCache(t, e.srv.Client(), opts)
	ctx := context.Background()
	warmNear(t, c, "{swr}", value("old"))
	// Make the entry stale (its soft expiry past) on the server's clock; the
	// HSET's invalidation drops the copy.
	e.rdb.HSet(ctx, entryName("{swr}"), "s", 1)
	var refreshes atomic.Int32
	release := make(chan struct{})
	refresh := func(context.Context) ([]byte, error) {
		refreshes.Add(1)
		<-release
		return []byte("new"), nil
	}
	for range 20 {
		t0 := time.Now()
		if v, err := c.Fetch(ctx, "{swr}", time.Hour, refresh); err != nil || string(v) != "old" || time.Since(t0) > prompt {
			t.Fatalf("during the refresh: %q, %v after %v; want the stale value at once", v, err, time.Since(t0))
		}
	}
	close(release)
	eventually(t, 5*time.Second, "the refreshed value, from memory", func() bool {
		before := c.Stats().NearHits
		v, _ := c.Fetch(ctx, "{swr}", time.Hour, refresh)
		return string(v) == "new" && c.Stats().NearHits > before
	})
	if n := refreshes.Load(); n != 1 {
		t.Fatalf("%d refreshes; want 1", n)
	}
}

// On a Cluster each master has a stream of its own; after a failover the
// streams follow the new master, and changes keep reaching every process.
func TestNearCache_ClusterFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	a := newCache(t, cl.Client(), nearOpts())
	b := newCache(t, cl.Client(), nearOpts())
	ctx := context.Background()
	key := "{nearcl}"
	changed := func(want string) {
		t.Helper()
		eventually(t, 10*time.Second, "a sees "+want, func() bool {
			v, err := a.Fetch(ctx, key, time.Hour, value("loaded"))
			return err == nil && string(v) == want
		})
	}
	warmNear(t, a, key, value("v0"))
	b.Set(ctx, key, []byte("v1"), time.Hour)
	changed("v1")
	master := cl.MasterOf(key)
	cl.Failover(cl.ReplicaOf(master))
	cl.WaitHealthy()
	warmNear(t, a, key, value("loaded")) // the streams are back on the new master
	if err := b.Set(ctx, key, []byte("v2"), time.Hour); err != nil {
		t.Fatal(err)
	}
	changed("v2")
}

// A near hit far from its soft expiry makes no XFetch draw (no logarithm,
// no random number: most of a near hit's time once): whatever the draw, it
// would stay a hit. Close to the expiry, the draw is made and can pick the
// copy for an early refresh, which then goes to Redis.
func TestNearCache_DrawsOnlyNearExpiry(t *testing.T) {
	t.Parallel()
	var draws atomic.Int64
	var u atomic.Value
	u.Store(0.5)
	opts := nearOpts()
	opts.Rand = func() float64 { draws.Add(1); return u.Load().(float64) }
	e := newEnv(t, nil)
	c := newCache(t, e.rdb, opts)
	ctx := context.Background()
	slow := func(context.Context) ([]byte, error) { time.Sleep(20 * time.Millisecond); return []byte("v"), nil } // the load's duration is what XFetch weighs
	if _, err := c.Fetch(ctx, "far", time.Hour, slow); err != nil {
		t.Fatal(err)
	}
	warmNear(t, c, "far", slow)
	before, hits := draws.Load(), c.Stats().NearHits
	for range 100 {
		if v, err := c.Fetch(ctx, "far", time.Hour, slow); err != nil || string(v) != "v" {
			t.Fatalf("Fetch = %q, %v", v, err)
		}
	}
	if d, n := draws.Load()-before, c.Stats().NearHits-hits; d != 0 || n != 100 {
		t.Fatalf("100 near hits an hour from expiry: %d near hits, %d draws; want 100 and 0", n, d)
	}

	// A 500 ms TTL after a 20 ms load: within Beta × 40 × 20 ms (800 ms)
	// of the expiry at once. A draw of U = 1-1e-12 (x ≈ 27.6, 552 ms)
	// picks the copy.
	if _, err := c.Fetch(ctx, "near", 500*time.Millisecond, slow); err != nil {
		t.Fatal(err)
	}
	u.Store(0.0)                                                      // x = 0: never picked while it warms
	eventually(t, 10*time.Second, "a near hit of near", func() bool { // its TTL, not warmNear's hour
		n := c.Stats().NearHits
		if _, err := c.Fetch(ctx, "near", 500*time.Millisecond, slow); err != nil {
			t.Fatal(err)
		}
		return c.Stats().NearHits > n
	})
	before, hits = draws.Load(), c.Stats().NearHits
	u.Store(1 - 1e-12)
	if _, err := c.Fetch(ctx, "near", 500*time.Millisecond, slow); err != nil {
		t.Fatal(err)
	}
	if draws.Load() == before || c.Stats().NearHits != hits {
		t.Fatalf("a copy near its expiry: %d draws, %d near hits; want a draw, and no near hit (XFetch picked it)",
			draws.Load()-before, c.Stats().NearHits-hits)
	}
}
