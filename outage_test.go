package corral_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Outages: Redis refusing connections, silent, or gone for a while, as a
// normal day (failsafe.go, internal/transport/down.go). The faults come from a killed server
// or a TCP proxy that refuses, cuts or swallows connections; origin loads
// are counted.

// quickStartClient is the README's Quick start client: go-redis's
// defaults (which retry a refused dial for seconds), with
// ContextTimeoutEnabled.
func quickStartClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// refusingAddr returns a loopback address that refuses connections
// (testkit.RefusingAddr).
func refusingAddr(t *testing.T) string { return testkit.RefusingAddr(t) }

// A refused connection fails open at once, whatever the client's retry
// options: the Quick start's client retries a refused dial for seconds, and
// corral must not sit that out. Each way of refusing: a Redis that was
// never there (a Cache's first call), one killed under a running Cache, and
// a partition that resets connections and refuses new ones (a proxy).
// "At once" is measured against the client's own patience, in the same
// run: each call takes under two thirds as long as a plain GET of that
// client on that address (which sits out the dial retries), whatever the
// machine's load; the target, about 50 ms, is logged.
func TestOutage_RefusedFailsFast(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"never there", "killed", "partitioned", "killed, DisableBreaker"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			var c *corral.Cache
			var addr string // where the Cache's client now meets a refusal
			switch how {
			case "killed, DisableBreaker": // every call goes to Redis, and still fails at once
				srv := redistest.Start(t)
				c = newCache(t, quickStartClient(t, srv.Addr), &corral.Options{DisableBreaker: true, Logger: testLogger(t)})
				if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
					t.Fatal(err)
				}
				srv.Kill()
				addr = srv.Addr
			case "never there":
				addr = refusingAddr(t)
				c = newCache(t, quickStartClient(t, addr), &corral.Options{Logger: testLogger(t)})
			case "killed":
				srv := redistest.Start(t)
				addr = srv.Addr
				c = newCache(t, quickStartClient(t, srv.Addr), &corral.Options{Logger: testLogger(t)})
				if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
					t.Fatal(err)
				}
				srv.Kill()
			case "partitioned":
				srv := redistest.Start(t)
				proxy := redistest.StartProxy(t, srv.Addr)
				addr = proxy.Addr
				c = newCache(t, quickStartClient(t, proxy.Addr), &corral.Options{Logger: testLogger(t)})
				if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
					t.Fatal(err)
				}
				if err := proxy.Refuse(true); err != nil {
					t.Fatal(err)
				}
			}
			var loads atomic.Int32
			var took [3]time.Duration
			for i := range took {
				start := time.Now()
				v, err := c.Fetch(ctx, fmt.Sprintf("k%d", i), time.Minute, slow(0, &loads, "v"))
				took[i] = time.Since(start)
				t.Logf("call %d answered after %v (target: about 50ms)", i, took[i].Round(time.Microsecond))
				if err != nil || string(v) != "v" {
					t.Fatalf("Fetch = %q, %v; want the loader's value (fail-open)", v, err)
				}
			}
			start := time.Now()
			if err := quickStartClient(t, addr).Get(ctx, "k").Err(); err == nil {
				t.Fatal("a plain GET on the refusing address succeeded")
			}
			retries := time.Since(start)
			t.Logf("a plain GET of the same client gave up after %v", retries.Round(time.Millisecond))
			for i, d := range took {
				if d > retries*2/3 {
					t.Fatalf("call %d failed open after %v, the client's own dial retries take %v; want well under them", i, d, retries)
				}
			}
			if st := c.Stats(); st.BreakerOpen == (how == "killed, DisableBreaker") || st.FailOpens != 3 {
				t.Fatalf("stats %+v; want the breaker open (none with DisableBreaker) and 3 fail-open calls", st)
			}
		})
	}
}

// A silent Redis fails a call within RedisTimeout and a monitor tick of
// the call, not twice that; with RedisTimeout 200 ms, 50 callers of 50
// keys on a black hole are all answered within 0.7 s, and later calls at
// once. Not parallel: its bound is tight for a test (about 0.25 s
// measured, 0.7 s allowed), and under the package's parallel tests on 2
// cores with -race a starved process once took 0.81 s.
func TestOutage_SilentBound(t *testing.T) {
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			o := &redis.Options{Addr: proxy.Addr}
			kind.opts(o)
			rdb := redis.NewClient(o)
			t.Cleanup(func() { rdb.Close() })
			c := newCache(t, rdb, &corral.Options{RedisTimeout: 200 * time.Millisecond, Logger: testLogger(t)})
			ctx := context.Background()
			if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
				t.Fatal(err)
			}
			proxy.Blackhole(true)
			start := time.Now()
			var wg sync.WaitGroup
			var slowest atomic.Int64
			for i := range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := c.Fetch(ctx, fmt.Sprintf("k%d", i), time.Minute, value("v"))
					if err != nil || string(v) != "v" {
						t.Errorf("Fetch = %q, %v; want the loader's value", v, err)
					}
					for took := int64(time.Since(start)); ; {
						if s := slowest.Load(); took <= s || slowest.CompareAndSwap(s, took) {
							break
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("50 callers answered within %v", time.Duration(slowest.Load()).Round(time.Millisecond))
			if d := time.Duration(slowest.Load()); d > 700*time.Millisecond {
				t.Fatalf("the slowest caller was answered after %v; want 0.7 s at most", d)
			}
			start = time.Now()
			if _, err := c.Fetch(ctx, "later", time.Minute, value("v")); err != nil || time.Since(start) > slack {
				t.Fatalf("a later call: %v after %v; want the value at once (breaker open)", err, time.Since(start))
			}
		})
	}
}

// outageFleet is n Caches, each with its own client through a proxy of its
// own to one Redis, so that the test can cut any of them off.
type outageFleet struct {
	srv     *redistest.Server
	proxies []*redistest.Proxy
	caches  []*corral.Cache
}

func newOutageFleet(t *testing.T, n int, opts func() *corral.Options) *outageFleet {
	f := &outageFleet{srv: redistest.Start(t)}
	for range n {
		p := redistest.StartProxy(t, f.srv.Addr)
		o := opts()
		if o.Logger == nil {
			o.Logger = quiet
		}
		f.proxies = append(f.proxies, p)
		f.caches = append(f.caches, newCache(t, quickStartClient(t, p.Addr), o))
	}
	return f
}

// keyLoads counts loads per instance and key.
type keyLoads struct {
	mu sync.Mutex
	n  map[[2]int]int
}

func (k *keyLoads) loader(inst, key int, d time.Duration) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		k.mu.Lock()
		if k.n == nil {
			k.n = map[[2]int]int{}
		}
		k.n[[2]int{inst, key}]++
		k.mu.Unlock()
		return slow(d, nil, fmt.Sprintf("v%d", key))(ctx)
	}
}

// max returns the most loads of one key in one instance, and the total.
func (k *keyLoads) max() (most, total int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range k.n {
		most, total = max(most, n), total+n
	}
	return most, total
}

// traffic runs goroutines per Cache of f, each fetching keys in turn with
// a 1 ms pause, for d, and returns the calls made and the slowest.
func traffic(t *testing.T, f *outageFleet, goroutines, keys int, d time.Duration, loads *keyLoads) (calls int64, slowest time.Duration) {
	t.Helper()
	var n, worst atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for i, c := range f.caches {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := g; time.Now().Before(end); k++ {
					key := k % keys
					start := time.Now()
					v, err := c.Fetch(context.Background(), fmt.Sprintf("k%d", key), time.Hour, loads.loader(i, key, 10*time.Millisecond))
					took := int64(time.Since(start))
					if err != nil || string(v) != fmt.Sprintf("v%d", key) {
						t.Errorf("instance %d: Fetch k%d = %q, %v", i, key, v, err)
						return
					}
					n.Add(1)
					for {
						if w := worst.Load(); took <= w || worst.CompareAndSwap(w, took) {
							break
						}
					}
					time.Sleep(time.Millisecond) // a paced client, not synchronisation
				}
			}()
		}
	}
	wg.Wait()
	return n.Load(), time.Duration(worst.Load())
}

// During an outage each key costs at most one origin load per instance per
// FailSafe.Throttle (1 s), whatever the number of callers: 8 instances x 10
// goroutines over 5 keys, Redis killed for 3 s, a 10 ms loader. (Without
// fail-safe memory, each flight loaded: about 12 loads per key per
// instance.)
func TestOutage_LoadsPerKeyPerInstance(t *testing.T) {
	t.Parallel()
	f := newOutageFleet(t, 8, func() *corral.Options { return &corral.Options{} })
	f.srv.Kill()
	var loads keyLoads
	calls, slowest := traffic(t, f, 10, 5, 3*time.Second, &loads)
	most, total := loads.max()
	t.Logf("%d calls, %d loads (at most %d of one key in one instance), slowest call %v", calls, total, most, slowest.Round(time.Millisecond))
	// 3 s at one load a second, plus one for a Throttle that ends just
	// before the run does, and a slow machine's ragged edges.
	if most > 4 {
		t.Fatalf("%d loads of one key in one instance in 3 s; want at most 4 (one per FailSafe.Throttle)", most)
	}
	var failSafe uint64
	for _, c := range f.caches {
		failSafe += c.Stats().FailSafeHits
	}
	if failSafe == 0 || uint64(calls) < failSafe {
		t.Fatalf("%d fail-safe hits in %d calls", failSafe, calls)
	}
}

// With the near cache, copies held when Redis went away are served through
// the outage, past NearCache.TTL (up to FailSafe.TTL): no load at all. The
// invalidation stream dropped with Redis; that no longer throws them away.
func TestOutage_NearCopiesServedThroughOutage(t *testing.T) {
	t.Parallel()
	f := newOutageFleet(t, 4, func() *corral.Options {
		return &corral.Options{NearCache: corral.NearCacheOptions{Size: 100, TTL: 200 * time.Millisecond}}
	})
	var warm keyLoads
	// Warm once a whole pass finds every key in every instance's memory: a
	// copy held early can still be dropped by the late invalidation of a
	// write made before it was read (the first load's commit), so each
	// instance first lets those reach it (settleNear).
	for i, c := range f.caches {
		for k := range 5 {
			warmNear(t, c, fmt.Sprintf("k%d", k), warm.loader(i, k, 0))
		}
		settleNear(t, c, f.srv.Client())
	}
	eventually(t, 10*time.Second, "a whole pass of near hits", func() bool {
		whole := true
		for i, c := range f.caches {
			for k := range 5 {
				before := c.Stats().NearHits
				warmNear(t, c, fmt.Sprintf("k%d", k), warm.loader(i, k, 0))
				whole = whole && c.Stats().NearHits == before+1 // the first Fetch of warmNear was a hit
			}
		}
		return whole
	})
	f.srv.Kill()
	var loads keyLoads
	calls, slowest := traffic(t, f, 10, 5, 2*time.Second, &loads) // ten NearCache.TTLs
	_, total := loads.max()
	t.Logf("%d calls, %d loads, slowest call %v", calls, total, slowest.Round(time.Millisecond))
	if total != 0 {
		t.Fatalf("%d loads during the outage; want none: every key was held in memory", total)
	}
}

// versioned is an origin whose value of every key is "v<version>".
type versioned struct{ version atomic.Int32 }

func (o *versioned) load(n *atomic.Int32) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		if n != nil {
			n.Add(1)
		}
		return []byte(fmt.Sprintf("v%d", o.version.Load())), nil
	}
}

// A Delete or a Set made while this process is cut off from Redis returns
// its error and drops this process's copy at once; once the partition
// heals, it reaches Redis within a second, with no further call (the Set as
// a Delete): another instance then loads the new value.
func TestOutage_InvalidationDuringPartition(t *testing.T) {
	t.Parallel()
	for _, write := range []string{"Delete", "Set"} {
		t.Run(write, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			opts := func() *corral.Options {
				return &corral.Options{NearCache: corral.NearCacheOptions{Size: 100}, Logger: testLogger(t)}
			}
			a := newCache(t, quickStartClient(t, proxy.Addr), opts()) // the one cut off
			b := newCache(t, srv.Client(), opts())
			ctx := context.Background()
			var origin versioned
			origin.version.Store(1)
			if v, err := a.Fetch(ctx, "{k}", time.Hour, origin.load(nil)); err != nil || string(v) != "v1" {
				t.Fatalf("warm-up: %q, %v", v, err)
			}
			warmNear(t, a, "{k}", origin.load(nil))
			if err := proxy.Refuse(true); err != nil {
				t.Fatal(err)
			}
			origin.version.Store(2) // the write the invalidation is for
			var err error
			if write == "Delete" {
				err = a.Delete(ctx, "{k}")
			} else {
				err = a.Set(ctx, "{k}", []byte("v2"), time.Hour)
			}
			if err == nil || !strings.Contains(err.Error(), "queued") {
				t.Fatalf("%s while cut off = %v; want its error, saying it is queued", write, err)
			}
			if st := a.Stats(); st.InvalidationsQueued != 1 || st.InvalidationsPending != 1 {
				t.Fatalf("stats %+v; want 1 invalidation queued and pending", st)
			}
			// This process's copy is gone at once: the origin's new value.
			if v, err := a.Fetch(ctx, "{k}", time.Hour, origin.load(nil)); err != nil || string(v) != "v2" {
				t.Fatalf("Fetch after the %s, cut off: %q, %v; want v2 (the copy dropped)", write, v, err)
			}
			// Redis still has v1 (the other instance sees it) until the heal.
			if v, _ := b.Get(ctx, "{k}"); string(v) != "v1" {
				t.Fatalf("before the heal Redis has %q", v)
			}
			if err := proxy.Refuse(false); err != nil {
				t.Fatal(err)
			}
			// Within a second of the heal on a quiet machine (the first
			// probe that finds Redis back replays the queue before its
			// breaker closes; a replay that fails is tried again every
			// 250 ms): logged, and bounded at 10 s, as a machine starved of
			// CPU can fail a replay or two on their RedisTimeout.
			healed := time.Now()
			eventually(t, 10*time.Second, "the invalidation reaches Redis", func() bool {
				_, err := b.Get(ctx, "{k}")
				return errors.Is(err, corral.ErrMiss)
			})
			t.Logf("applied %v after the heal", time.Since(healed).Round(time.Millisecond))
			if v, err := b.Fetch(ctx, "{k}", time.Hour, origin.load(nil)); err != nil || string(v) != "v2" {
				t.Fatalf("the other instance: %q, %v; want v2, loaded anew", v, err)
			}
			// The queue counts the replay once Redis's reply is read, which
			// can be after b already sees its effect.
			eventually(t, time.Second+slack, "the replay to be counted", func() bool {
				st := a.Stats()
				return st.InvalidationsReplayed == 1 && st.InvalidationsPending == 0
			})
			if st := a.Stats(); st.InvalidationsReplayed != 1 || st.InvalidationsPending != 0 {
				t.Fatalf("stats %+v; want the invalidation replayed", st)
			}
		})
	}
}

// The queue is bounded: past MaxPendingInvalidations, an invalidation is
// dropped, counted and warned of (once), and its error says so; those
// queued are applied once Redis is back.
func TestOutage_InvalidationQueueOverflow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	logs := &testkit.Buffer{}
	c := newCache(t, quickStartClient(t, srv.Addr), &corral.Options{MaxPendingInvalidations: 3,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	for i := range 5 {
		if err := c.Set(ctx, fmt.Sprintf("k%d", i), []byte("old"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	srv.Kill()
	for i := range 5 {
		err := c.Delete(ctx, fmt.Sprintf("k%d", i))
		if want := map[bool]string{true: "queued", false: "not queued"}[i < 3]; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Delete %d = %v; want an error saying %q", i, err, want)
		}
	}
	if st := c.Stats(); st.InvalidationsQueued != 3 || st.InvalidationsDropped != 2 || st.InvalidationsPending != 3 {
		t.Fatalf("stats %+v; want 3 queued, 2 dropped", st)
	}
	if n := strings.Count(logs.String(), "queue of invalidations for Redis is full"); n != 1 {
		t.Fatalf("%d warnings of the full queue; want 1:\n%s", n, logs.String())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second+slack, "the queued invalidations are applied", func() bool {
		return c.Stats().InvalidationsReplayed == 3
	})
}

// Close applies what is queued, within its bound, though Redis came back
// only a moment before.
func TestOutage_CloseAppliesQueued(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	admin := srv.Client()
	rdb := quickStartClient(t, proxy.Addr)
	c, err := corral.New(rdb, &corral.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("old"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Refuse(true); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "k"); err == nil {
		t.Fatal("Delete succeeded cut off from Redis")
	}
	if err := proxy.Refuse(false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Close()
	if took := time.Since(start); took > corral.DefaultRedisTimeout+slack {
		t.Fatalf("Close took %v", took)
	}
	if n := admin.Exists(ctx, wire.NewNames("corral", "k").Entry).Val(); n != 0 {
		t.Fatalf("after Close, the Delete made while cut off is not in Redis: %+v", c.Stats())
	}
}

// A caller whose deadline comes before corral's verdict on a silent Redis
// is not left to time out: it fails open in time to run the loader before
// its deadline, once per process however many such callers there are.
func TestOutage_ShortDeadlineOnASilentRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := newCache(t, quickStartClient(t, proxy.Addr), &corral.Options{Logger: testLogger(t)}) // RedisTimeout 2s
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	var loads atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			v, err := c.Fetch(cctx, "k", time.Minute, slow(50*time.Millisecond, &loads, "v"))
			if err != nil || string(v) != "v" {
				t.Errorf("Fetch with a 1 s deadline on a silent Redis = %q, %v; want the loader's value", v, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("20 callers with 1 s deadlines answered within %v, %d loads", time.Since(start).Round(time.Millisecond), loads.Load())
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads; want 1 (one fail-open load per process)", n)
	}
}

// A rescued caller still leaves at its own deadline: the fail-open load it
// starts runs on for the others (C07's kind) and for memory, and one that
// never returns (C01's kind) makes it return context.DeadlineExceeded, not
// wait for LoadTimeout. Fetch and FetchMany alike.
func TestOutage_RescuedCallerKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	const slack = 500 * time.Millisecond // loose: the bound is the deadline; the slack is the machine's
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := newCache(t, quickStartClient(t, proxy.Addr), &corral.Options{Logger: testLogger(t)}) // RedisTimeout 2s
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)

	t.Run("a load that outlives the first caller", func(t *testing.T) {
		var loads atomic.Int32
		load := slow(300*time.Millisecond, &loads, "v") // the origin's own time
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := c.Fetch(short, "k", time.Minute, load); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the first caller = %v; want context.DeadlineExceeded at its deadline", err)
		}
		if took := time.Since(start); took > 100*time.Millisecond+slack {
			t.Fatalf("the first caller returned after %v; want at its 100 ms deadline", took)
		}
		// A later caller gets the value of the load the first one started:
		// joined while it runs, or from memory once it ended.
		longer, cancel2 := context.WithTimeout(ctx, time.Second)
		defer cancel2()
		if v, err := c.Fetch(longer, "k", time.Minute, load); err != nil || string(v) != "v" || loads.Load() != 1 {
			t.Fatalf("the later caller = %q, %v after %d loads; want the one load's value", v, err, loads.Load())
		}
	})
	t.Run("a load that never returns", func(t *testing.T) {
		stuck := make(chan struct{})
		t.Cleanup(func() { close(stuck) })
		load := func(context.Context) ([]byte, error) { <-stuck; return nil, nil } // ignores its context
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := c.Fetch(short, "stuck", time.Minute, load); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Fetch = %v; want context.DeadlineExceeded", err)
		}
		many := func(context.Context, []string) (map[string][]byte, error) { <-stuck; return nil, nil }
		_, err := c.FetchMany(short, []string{"stuck a", "stuck b"}, time.Minute, many)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("FetchMany = %v; want context.DeadlineExceeded for its keys", err)
		}
		if took := time.Since(start); took > 100*time.Millisecond+slack {
			t.Fatalf("the callers returned after %v; want at their 100 ms deadline (LoadTimeout is 1 s)", took)
		}
	})
}

// A caller rescued while Redis is paused starts the key's fail-open load;
// when Redis answers again, the caller that waited for it takes the lease
// and commits that load's result, rather than ask the origin twice, unless
// the loader asked IsFailOpen (its result may not be a leased load's).
func TestOutage_RescueThenLeaseLoadsOnce(t *testing.T) {
	t.Parallel()
	for _, asks := range []bool{false, true} {
		t.Run(fmt.Sprintf("loader asks IsFailOpen: %v", asks), func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client()
			c := newCache(t, quickStartClient(t, srv.Addr), &corral.Options{Logger: testLogger(t)}) // RedisTimeout 2s
			ctx := context.Background()
			if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
				t.Fatal(err)
			}
			// Whether the short caller is rescued depends on nothing at all
			// being heard from Redis once its call began (a reply sent just
			// before the pause counts): try until it was.
			for try := 0; ; try++ {
				if try == 10 {
					t.Fatal("the short caller was never rescued")
				}
				key := fmt.Sprintf("k%d", try)
				var openLoads, leasedLoads atomic.Int32
				load := func(ctx context.Context) ([]byte, error) {
					if corral.RunsFailOpen(ctx) {
						openLoads.Add(1)
						if asks && corral.IsFailOpen(ctx) {
							return []byte("degraded"), nil
						}
					} else {
						leasedLoads.Add(1)
					}
					<-time.After(200 * time.Millisecond) // the origin's own time
					return []byte("v"), nil
				}
				if err := admin.Do(ctx, "CLIENT", "PAUSE", "300", "ALL").Err(); err != nil {
					t.Fatal(err)
				}
				short, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // rescued half-way, at 50 ms
				rescued := make(chan struct{})
				go func() {
					defer close(rescued)
					c.Fetch(short, key, time.Minute, load)
				}()
				v, err := c.Fetch(ctx, key, time.Minute, load) // waits for Redis
				<-rescued
				cancel()
				if err != nil || string(v) != "v" {
					t.Fatalf("the caller that waited for Redis = %q, %v; want the leased value", v, err)
				}
				if openLoads.Load() == 0 {
					continue
				}
				wantLeased := int32(0) // the rescued load's value is committed
				if asks {
					wantLeased = 1 // the degraded one is not: the lease loads
				}
				if n := leasedLoads.Load(); openLoads.Load() != 1 || n != wantLeased {
					t.Fatalf("%d fail-open and %d leased loads; want 1 and %d", openLoads.Load(), n, wantLeased)
				}
				if v, err := c.Get(ctx, key); err != nil || string(v) != "v" {
					t.Fatalf("Get = %q, %v; want the value stored under the lease, never the degraded one", v, err)
				}
				t.Logf("rescued on try %d", try+1)
				return
			}
		})
	}
}

// The same for FetchMany: callers whose deadline comes before corral's
// verdict on a silent Redis get their keys' values in time, every key
// loaded once in the process, whatever the number of callers (the callers
// rescued at the same moment share the keys' loads, so loadMany may be
// called by more than one of them, each for the keys it runs). Keys a value
// was held for are answered from memory.
func TestOutage_ShortDeadlineFetchManyOnASilentRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := newCache(t, quickStartClient(t, proxy.Addr), &corral.Options{Logger: testLogger(t),
		NearCache: corral.NearCacheOptions{Size: 100, TTL: 10 * time.Millisecond}}) // RedisTimeout 2s
	ctx := context.Background()
	warmNearSettled(t, c, srv.Client(), func(string) func(context.Context) ([]byte, error) { return value("h") }, "held")
	proxy.Blackhole(true)
	time.Sleep(20 * time.Millisecond) // the held copy's NearCache.TTL passes: the clock, not synchronisation
	keys := []string{"held", "a", "b", "c"}
	var mu sync.Mutex
	var calls int
	loads := map[string]int{}
	loadMany := func(ctx context.Context, missing []string) (map[string][]byte, error) {
		mu.Lock()
		calls++
		for _, k := range missing {
			loads[k]++
		}
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // the origin's own time, not synchronisation
		vals := map[string][]byte{}
		for _, k := range missing {
			vals[k] = []byte("v-" + k)
		}
		return vals, nil
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			got, err := c.FetchMany(cctx, keys, time.Minute, loadMany)
			if err != nil {
				t.Errorf("FetchMany with a 1 s deadline on a silent Redis: %v; want the values", err)
				return
			}
			want := map[string]string{"held": "h", "a": "v-a", "b": "v-b", "c": "v-c"}
			for k, v := range want {
				if string(got[k]) != v {
					t.Errorf("FetchMany[%q] = %q; want %q", k, got[k], v)
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("20 FetchMany callers with 1 s deadlines answered within %v: %d calls of loadMany, loads %v",
		time.Since(start).Round(time.Millisecond), calls, loads)
	if len(loads) != 3 || loads["a"] != 1 || loads["b"] != 1 || loads["c"] != 1 {
		t.Fatalf("loads by key %v; want a, b and c loaded once (held answered from memory)", loads)
	}
	if calls > 3 {
		t.Fatalf("%d calls of loadMany; want at most one for each key loaded", calls)
	}
	if s := c.Stats(); s.FailSafeHits == 0 {
		t.Fatalf("Stats.FailSafeHits = 0; want the held key's answers from memory counted")
	}
}

// Get is answered from memory too while Redis cannot be used, and never
// reads what Redis held before an invalidation this process has queued.
func TestOutage_Get(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("from memory while Redis is down", func(t *testing.T) {
		srv := redistest.Start(t)
		c := newCache(t, quickStartClient(t, srv.Addr), &corral.Options{Logger: testLogger(t),
			NearCache: corral.NearCacheOptions{Size: 100}})
		warmNearSettled(t, c, srv.Client(), func(string) func(context.Context) ([]byte, error) { return value("h") }, "held")
		srv.Kill()
		calls := c.Stats().Calls()
		if v, err := c.Get(ctx, "held"); err != nil || string(v) != "h" {
			t.Fatalf("Get of a held key with Redis down = %q, %v; want its copy", v, err)
		}
		if st := c.Stats(); st.Calls() != calls || st.FailSafeHits != 0 {
			t.Fatalf("Stats %+v after Get; want no call counted: Get is not one", st)
		}
		if _, err := c.Get(ctx, "not held"); !errors.Is(err, corral.ErrCircuitOpen) {
			t.Fatalf("Get of a key not held with Redis down: %v; want ErrCircuitOpen", err)
		}
	})
	t.Run("an invalidation queued", func(t *testing.T) {
		master := redistest.Start(t)
		replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
		writer := newCache(t, master.Client(), nil)
		if err := writer.Set(ctx, "k", []byte("old"), time.Hour); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the entry replicated", func() bool {
			return replica.Client().Exists(ctx, wire.EntryName("corral", "k")).Val() == 1
		})
		c := newCache(t, replica.Client(), &corral.Options{Logger: testLogger(t)})
		if v, err := c.Get(ctx, "k"); err != nil || string(v) != "old" {
			t.Fatalf("Get = %q, %v; want the replicated entry", v, err)
		}
		if err := c.Delete(ctx, "k"); !errors.Is(err, corral.ErrWriteRefused) {
			t.Fatalf("Delete on a replica: %v; want ErrWriteRefused, queued", err)
		}
		if v, err := c.Get(ctx, "k"); !errors.Is(err, corral.ErrMiss) {
			t.Fatalf("Get after a Delete still queued = %q, %v; want ErrMiss, not the entry Redis still holds", v, err)
		}
	})
}

// A loader can tell a fail-open run (its result not stored in Redis, no
// lease taken) from one under a lease.
func TestOutage_IsFailOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newCache(t, quickStartClient(t, srv.Addr), &corral.Options{Logger: testLogger(t)})
	ctx := context.Background()
	var seen []bool
	load := func(ctx context.Context) ([]byte, error) {
		seen = append(seen, corral.IsFailOpen(ctx))
		return []byte("v"), nil
	}
	if _, err := c.Fetch(ctx, "leased", time.Minute, load); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, err := c.Fetch(ctx, "failed open", time.Minute, load); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] || !seen[1] {
		t.Fatalf("IsFailOpen in the loader: %v; want false under a lease, true failing open", seen)
	}
	if corral.IsFailOpen(ctx) {
		t.Fatal("IsFailOpen of a caller's context")
	}
}

// A password rotated under a running Cache (the server's changed, the
// connections dropped): calls are answered from memory, without a warning
// each, Health says why; once the client has the new password, the Cache
// uses Redis again on its own.
func TestOutage_PasswordRotated(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">old", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	var password atomic.Pointer[string]
	old, rotated := "old", "new"
	password.Store(&old)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true,
		CredentialsProvider: func() (string, string) { return "app", *password.Load() }})
	t.Cleanup(func() { rdb.Close() })
	logs := &testkit.Buffer{}
	c := newCache(t, rdb, &corral.Options{NearCache: corral.NearCacheOptions{Size: 100},
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	var loads atomic.Int32
	warmNearSettled(t, c, admin, func(key string) func(context.Context) ([]byte, error) { return value("v" + key[1:]) },
		"k0", "k1", "k2", "k3", "k4")
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "resetpass", ">"+rotated).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ClientKillByFilter(ctx, "USER", "app").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		key := fmt.Sprintf("k%d", i%5)
		v, err := c.Fetch(ctx, key, time.Hour, slow(0, &loads, "loaded"))
		if err != nil || string(v) != fmt.Sprintf("v%d", i%5) {
			t.Fatalf("call %d: Fetch %s = %q, %v; want the held value", i, key, v, err)
		}
	}
	if n := loads.Load(); n != 0 {
		t.Fatalf("%d loads; want none (every key was held)", n)
	}
	// Until the near copies are dropped (the invalidation connection was
	// killed too) or expire, calls are near hits; then memory answers them.
	eventually(t, 5*time.Second, "Health to say the password is refused, and memory to answer", func() bool {
		if _, err := c.Fetch(ctx, "k0", time.Hour, slow(0, &loads, "loaded")); err != nil {
			t.Fatal(err)
		}
		err := c.Health()
		return errors.Is(err, corral.ErrCircuitOpen) && strings.Contains(err.Error(), "WRONGPASS") && c.Stats().FailSafeHits > 0
	})
	if n := loads.Load(); n != 0 || c.Stats().FailSafeHits == 0 {
		t.Fatalf("%d loads, stats %+v; want none, and answers from memory", n, c.Stats())
	}
	if n := strings.Count(logs.String(), "level=WARN"); n > 3 {
		t.Fatalf("%d warnings for 500 calls; want a few at most:\n%s", n, logs.String())
	}
	password.Store(&rotated) // the client learns the new password
	eventually(t, 5*time.Second, "the Cache uses Redis again", func() bool {
		_, err := c.Get(ctx, "k0")
		return err == nil && c.Health() == nil
	})
	t.Logf("warnings logged:\n%s", logs.String())
}

// When Redis comes back, the instances do not all come back at the same
// instant (each node's recovery probe is spread at random), and the keys
// are loaded once across the fleet, under their leases: no burst of
// fail-open loads.
func TestOutage_NoHerdAtRecovery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	closed := map[int]time.Time{} // each instance's first breaker closing
	n := 0
	f := newOutageFleet(t, 8, func() *corral.Options {
		i := n
		n++
		return &corral.Options{FailSafe: corral.FailSafeOptions{Throttle: time.Minute}, // held through the test
			Observer: observerFunc(func(_ context.Context, e corral.Event) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := closed[i]; !ok && e.Kind == corral.EventBreakerClosed {
					closed[i] = time.Now()
				}
			})}
	})
	var loads keyLoads
	f.srv.Kill()
	traffic(t, f, 5, 5, 500*time.Millisecond, &loads) // each instance fails open once per key
	_, during := loads.max()
	if err := f.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	traffic(t, f, 5, 5, time.Second, &loads)
	_, total := loads.max()
	// Each instance's monitor closes its breaker on its own schedule,
	// spread on purpose: on a starved machine some close after the second
	// of traffic. Every one must, within the deadline.
	testkit.Within(30*time.Second, 10*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(closed) == len(f.caches)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(closed) != len(f.caches) {
		for i, c := range f.caches {
			t.Logf("instance %d: hits %d, health %v", i, c.Stats().Hits, c.Health())
		}
		t.Fatalf("%d breakers closed after the restart; want %d", len(closed), len(f.caches))
	}
	first, last := closed[0], closed[0]
	for _, at := range closed {
		first, last = minTime(first, at), maxTime(last, at)
	}
	t.Logf("%d loads during the outage, %d after it; instances back %v to %v after the restart",
		during, total-during, first.Sub(restarted).Round(time.Millisecond), last.Sub(restarted).Round(time.Millisecond))
	if during > 8*5 {
		t.Fatalf("%d loads during the outage; want one per key per instance at most (40)", during)
	}
	if after := total - during; after > 5 {
		t.Fatalf("%d loads after the restart; want one per key (5), under its lease", after)
	}
	if last.Sub(first) < 2*time.Millisecond {
		t.Fatalf("the 8 instances came back within %v of each other; want them spread", last.Sub(first))
	}
}

// observerFunc is an Observer from a function.
type observerFunc func(context.Context, corral.Event)

func (f observerFunc) Observe(ctx context.Context, e corral.Event) { f(ctx, e) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
