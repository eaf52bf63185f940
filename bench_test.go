package corral_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/observetest"
	"github.com/redis/go-redis/v9"
)

// The benchmarks run against the redis-server TestMain starts. The hit
// benchmarks compare corral with BenchmarkRawGet, run in the same process on
// the same kind of client and values: b.RunParallel over hitKeys distinct
// warm keys, so that in-process coalescing does not flatter corral. The
// ratio of their ns/op is corral's cost on a hit.

var benchValue = bytes.Repeat([]byte("x"), 1024)

// hitKeys is how many distinct warm keys the hit benchmarks cycle through.
const hitKeys = 1000

// hitSizes are the value sizes the hit benchmarks run with.
var hitSizes = []struct {
	name string
	size int
}{{"1KiB", 1 << 10}, {"100KiB", 100 << 10}}

// benchClient is the benchmarks' client: go-redis with
// ContextTimeoutEnabled, as the README recommends (corral then reads hits in
// the calling goroutine; a plain GET is the same either way).
func benchClient(b *testing.B) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

// parallelKeys runs f over the hitKeys keys named by prefix in parallel,
// each goroutine starting at its own place in the cycle.
// hitParallelism is the hit benchmarks' goroutines per CPU
// (b.SetParallelism): 1 by default; a service serves many requests at once,
// as -hit.parallelism=16 shows.
var hitParallelism = flag.Int("hit.parallelism", 1, "goroutines per CPU in the hit benchmarks")

func parallelKeys(b *testing.B, prefix string, f func(key string)) {
	observetest.ParallelKeys(b, *hitParallelism, prefix, f)
}

// BenchmarkRawGet is the baseline: a plain GET of a warm value.
func BenchmarkRawGet(b *testing.B) {
	for _, sz := range hitSizes {
		b.Run(sz.name, func(b *testing.B) {
			rdb := benchClient(b)
			ctx := context.Background()
			value := bytes.Repeat([]byte("x"), sz.size)
			prefix := "bench:raw:" + sz.name + ":"
			for i := range hitKeys {
				rdb.Set(ctx, prefix+strconv.Itoa(i), value, 0)
			}
			b.SetBytes(int64(sz.size))
			b.ReportAllocs()
			b.ResetTimer()
			parallelKeys(b, prefix, func(key string) {
				if v, err := rdb.Get(ctx, key).Bytes(); err != nil || len(v) != sz.size {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkFetchHit is Fetch of the same warm values from Redis.
func BenchmarkFetchHit(b *testing.B) {
	fetchHit(b, benchClient)
}

// BenchmarkFetchHitDefaultClient is BenchmarkFetchHit with a client that
// does not bound its reads by the context (go-redis's default): hits go
// through the pipeline's sender goroutines.
func BenchmarkFetchHitDefaultClient(b *testing.B) {
	fetchHit(b, func(b *testing.B) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		b.Cleanup(func() { rdb.Close() })
		return rdb
	})
}

func fetchHit(b *testing.B, client func(*testing.B) *redis.Client) {
	for _, sz := range hitSizes {
		b.Run(sz.name, func(b *testing.B) {
			c := corral.Must(corral.New(client(b), &corral.Options{Logger: quiet, DisableEarlyRefresh: true}))
			defer c.Close()
			ctx := context.Background()
			value := bytes.Repeat([]byte("x"), sz.size)
			load := func(context.Context) ([]byte, error) { return value, nil }
			prefix := "bench:hit:" + sz.name + ":"
			for i := range hitKeys {
				if _, err := c.Fetch(ctx, prefix+strconv.Itoa(i), time.Hour, load); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(sz.size))
			b.ReportAllocs()
			b.ResetTimer()
			parallelKeys(b, prefix, func(key string) {
				if v, err := c.Fetch(ctx, key, time.Hour, load); err != nil || len(v) != sz.size {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkHitVsRawGet is the ratio of a Redis hit (1 KiB, read inline) to
// a raw GET of the same value on the same client, measured as make bench's
// hit-path measures it: in one goroutine, blocks of 10 GETs and 10 hits
// alternating, the median block of each, so that a change in the machine's
// speed between two benchmarks run one after the other (BenchmarkRawGet,
// then BenchmarkFetchHit: they disagreed with make bench by up to 50% on a
// noisy machine) falls on both alike. It reports hit-ns/op, get-ns/op and
// their ratio, x-GET; ns/op is the two mixed. -benchtime 20000x or more.
func BenchmarkHitVsRawGet(b *testing.B) {
	rdb := benchClient(b)
	c := corral.Must(corral.New(rdb, &corral.Options{Logger: quiet, DisableEarlyRefresh: true}))
	defer c.Close()
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return benchValue, nil }
	raw, hit := make([]string, hitKeys), make([]string, hitKeys)
	for i := range hitKeys {
		raw[i], hit[i] = "bench:ratio:raw:"+strconv.Itoa(i), "bench:ratio:hit:"+strconv.Itoa(i)
		if err := rdb.Set(ctx, raw[i], benchValue, 0).Err(); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Fetch(ctx, hit[i], time.Hour, load); err != nil {
			b.Fatal(err)
		}
	}
	get, h := alternated(b, func(i int) {
		if v, err := rdb.Get(ctx, raw[i]).Bytes(); err != nil || len(v) != len(benchValue) {
			b.Fatal(err)
		}
	}, func(i int) {
		if v, err := c.Fetch(ctx, hit[i], time.Hour, load); err != nil || len(v) != len(benchValue) {
			b.Fatal(err)
		}
	})
	b.ReportMetric(float64(h), "hit-ns/op")
	b.ReportMetric(float64(get), "get-ns/op")
	b.ReportMetric(float64(h)/float64(get), "x-GET")
}

// alternated calls first and second, each with i cycling over hitKeys, in
// alternating blocks of 10 until b.N calls are made in all, and returns
// each one's median block's time per call: a change in the machine's
// speed falls on both alike.
func alternated(b *testing.B, first, second func(i int)) (one, two time.Duration) {
	const block = 10
	var ones, twos []time.Duration
	timed := func(f func(int), k int) time.Duration {
		t := time.Now()
		for i := range block {
			f((k + i) % hitKeys)
		}
		return time.Since(t)
	}
	b.ResetTimer()
	for k := 0; k < b.N; k += 2 * block {
		ones = append(ones, timed(first, k))
		twos = append(twos, timed(second, k))
	}
	b.StopTimer()
	slices.Sort(ones)
	slices.Sort(twos)
	return ones[len(ones)/2] / block, twos[len(twos)/2] / block
}

// warmed fetches the hit benchmarks' keys under prefix (fetch), held by c's
// near cache when near is set.
func warmed(b *testing.B, c *corral.Cache, near bool, prefix string, fetch func(key string) error) {
	if near {
		warmNearKeys(b, c, prefix, fetch)
		return
	}
	for i := range hitKeys {
		if err := fetch(prefix + strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchRecord is the typed value of the Fetch[T] benchmarks: about 1 KiB of
// JSON.
type benchRecord struct {
	ID    int      `json:"id"`
	Name  string   `json:"name"`
	Tags  []string `json:"tags"`
	Notes string   `json:"notes"`
}

func newBenchRecord() benchRecord {
	return benchRecord{ID: 42, Name: "corral", Tags: []string{"cache", "stampede", "redis"}, Notes: strings.Repeat("n", 900)}
}

// BenchmarkRawGetDecode is the baseline of typed hits: a raw GET of the JSON
// and its decoding.
func BenchmarkRawGetDecode(b *testing.B) {
	rdb := benchClient(b)
	ctx := context.Background()
	data, _ := json.Marshal(newBenchRecord())
	for i := range hitKeys {
		rdb.Set(ctx, "bench:rawjson:"+strconv.Itoa(i), data, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	parallelKeys(b, "bench:rawjson:", func(key string) {
		v, err := rdb.Get(ctx, key).Bytes()
		var r benchRecord
		if err != nil || json.Unmarshal(v, &r) != nil || r.ID != 42 {
			b.Fatal(err)
		}
	})
}

// BenchmarkFetchTypedHit is Fetch[T] of the same records from Redis.
func BenchmarkFetchTypedHit(b *testing.B) {
	c := corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet, DisableEarlyRefresh: true}))
	defer c.Close()
	ctx := context.Background()
	load := func(context.Context) (benchRecord, error) { return newBenchRecord(), nil }
	for i := range hitKeys {
		if _, err := corral.Fetch(ctx, c, "bench:typed:"+strconv.Itoa(i), time.Hour, load); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	parallelKeys(b, "bench:typed:", func(key string) {
		if r, err := corral.Fetch(ctx, c, key, time.Hour, load); err != nil || r.ID != 42 {
			b.Fatal(err)
		}
	})
}

// BenchmarkHotKeyRequests is a hot key's hits as a server sees them: each
// request on a goroutine of its own (as net/http gives each), 512 at once
// on one warm key, so that most join the peek another request sent and
// are answered when it is read. ns/op is per request. A request that took
// its answer in frames deeper than its wait outgrew its first stack
// (docs/design.md, 3.3, "Stacks, once woken").
func BenchmarkHotKeyRequests(b *testing.B) {
	c, err := corral.New(benchClient(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return benchValue, nil }
	if _, err := c.Fetch(ctx, "hot", time.Hour, load); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += 512 {
		var wg sync.WaitGroup
		for range 512 {
			wg.Go(func() {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if _, err := c.Fetch(rctx, "hot", time.Hour, load); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

// BenchmarkStampede runs a cold-key stampede per iteration: 8 instances
// (each its own client and Cache) x 50 goroutines, a 10 ms origin, and
// reports origin loads and Redis commands per stampede.
func BenchmarkStampede(b *testing.B) {
	const instances, goroutines = 8, 50
	caches := make([]*corral.Cache, instances)
	hooks := make([]*faults, instances)
	for i := range caches {
		rdb := benchClient(b)
		hooks[i] = &faults{}
		rdb.AddHook(hooks[i])
		caches[i] = corral.Must(corral.New(rdb, &corral.Options{Logger: quiet}))
		defer caches[i].Close()
	}
	var loads atomic.Int64
	load := func(ctx context.Context) ([]byte, error) {
		loads.Add(1)
		<-time.After(10 * time.Millisecond) // the origin's latency
		return benchValue, nil
	}
	commands := func() (n int64) {
		for i, c := range caches {
			st := c.Stats()
			n += hooks[i].commands.Load() + int64(st.Subscribes+st.Unsubscribes)
		}
		return n
	}
	ctx := context.Background()
	before := commands()
	b.ResetTimer()
	for i := range b.N {
		key := "bench:stampede:" + strconv.Itoa(i) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, c := range caches {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if _, err := c.Fetch(ctx, key, time.Minute, load); err != nil {
						b.Error(err)
					}
				}()
			}
		}
		close(start)
		wg.Wait()
	}
	b.StopTimer()
	b.ReportMetric(float64(loads.Load())/float64(b.N), "loads/op")
	b.ReportMetric(float64(commands()-before)/float64(b.N), "redis-cmds/op")
}

// BenchmarkExpiryCycle keeps a hot key under steady traffic (4 instances x 8
// goroutines, 1 ms think time) while it expires every 100 ms; one op is one
// TTL. It reports origin loads per expiry and the p99 latency of all calls,
// for plain cache-aside (the baseline) and for corral with a stale window.
func BenchmarkExpiryCycle(b *testing.B) {
	const instances, goroutines = 4, 8
	const ttl, loadTime = 100 * time.Millisecond, 10 * time.Millisecond
	var loads atomic.Int64
	origin := func(ctx context.Context) ([]byte, error) {
		loads.Add(1)
		<-time.After(loadTime)
		return benchValue, nil
	}
	run := func(b *testing.B, fetch func(inst int, key string) error) {
		loads.Store(0)
		key := "bench:expiry:" + strconv.FormatInt(time.Now().UnixNano(), 36)
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		b.ResetTimer()
		end := time.Now().Add(time.Duration(b.N) * ttl)
		for i := range instances {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for time.Now().Before(end) {
						t0 := time.Now()
						if err := fetch(i, key); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
						<-time.After(time.Millisecond) // think time: steady, not saturating, load
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(loads.Load())/float64(b.N), "loads/expiry")
		b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Millisecond), "p99-ms")
	}
	ctx := context.Background()
	b.Run("naive", func(b *testing.B) {
		clients := make([]*redis.Client, instances)
		for i := range clients {
			clients[i] = benchClient(b)
		}
		run(b, func(i int, key string) error {
			if _, err := clients[i].Get(ctx, key).Bytes(); err == nil {
				return nil
			} else if err != redis.Nil {
				return err
			}
			v, err := origin(ctx)
			if err != nil {
				return err
			}
			return clients[i].Set(ctx, key, v, ttl).Err()
		})
	})
	b.Run("corral", func(b *testing.B) {
		caches := make([]*corral.Cache, instances)
		for i := range caches {
			caches[i] = corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet, StaleTTL: ttl}))
			defer caches[i].Close()
		}
		run(b, func(i int, key string) error {
			_, err := caches[i].Fetch(ctx, key, ttl, origin)
			return err
		})
	})
}

// BenchmarkBigValue serves a 16 MiB value, cold, to 8 instances (each its
// own client and Cache) after one load, against the baseline of 8 clients
// each reading it with a raw GET, both timed in each iteration. It reports
// both times and their ratio (x-raw), and the loads per stampede.
func BenchmarkBigValue(b *testing.B) {
	const instances, size = 8, 16 << 20
	value := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	ctx := context.Background()
	clients := make([]*redis.Client, instances)
	caches := make([]*corral.Cache, instances)
	for i := range caches {
		clients[i] = benchClient(b)
		caches[i] = corral.Must(corral.New(clients[i], &corral.Options{Logger: quiet}))
		defer caches[i].Close()
	}
	if err := clients[0].Set(ctx, "bench:big:raw", value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	together := func(f func(i int)) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for i := range instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f(i)
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	var loads atomic.Int64
	var raw, served time.Duration
	b.ResetTimer()
	for i := range b.N {
		raw += together(func(i int) {
			if v, err := clients[i].Get(ctx, "bench:big:raw").Bytes(); err != nil || len(v) != size {
				b.Error(err)
			}
		})
		key := "bench:big:" + strconv.Itoa(i) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
		served += together(func(i int) {
			v, err := caches[i].Fetch(ctx, key, time.Minute, func(context.Context) ([]byte, error) {
				loads.Add(1)
				return value, nil
			})
			if err != nil || len(v) != size {
				b.Error(err)
			}
		})
	}
	b.ReportMetric(float64(raw.Milliseconds())/float64(b.N), "raw-ms/op")
	b.ReportMetric(float64(served.Milliseconds())/float64(b.N), "corral-ms/op")
	b.ReportMetric(float64(served)/float64(raw), "x-raw")
	b.ReportMetric(float64(loads.Load())/float64(b.N), "loads/op")
}

// BenchmarkWaiterWake measures how soon a waiter in another process gets
// the value once the lease holder's load returns: the commit, its notice,
// and the waiter's wake-up. The tests assert only a loose bound on it.
func BenchmarkWaiterWake(b *testing.B) {
	holder := corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet}))
	defer holder.Close()
	waiter := corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet}))
	defer waiter.Close()
	ctx := context.Background()
	var total time.Duration
	for i := range b.N {
		key := "bench:wake:" + strconv.Itoa(i) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
		started, release := make(chan struct{}), make(chan struct{})
		go holder.Fetch(ctx, key, time.Minute, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return benchValue, nil
		})
		<-started
		got := make(chan time.Time, 1)
		go func() {
			waiter.Fetch(ctx, key, time.Minute, func(context.Context) ([]byte, error) { return benchValue, nil })
			got <- time.Now()
		}()
		for waiter.Stats().Waits <= uint64(i) { // subscribed and waiting
			<-time.After(100 * time.Microsecond)
		}
		<-time.After(time.Millisecond) // past its re-check after subscribing
		ended := time.Now()
		close(release)
		total += (<-got).Sub(ended)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N), "wake-µs/op")
}

// BenchmarkDeadlineOvershoot measures how long after its own deadline a
// caller returns while the load it waits for is stuck: the tests assert
// only a loose bound on it.
func BenchmarkDeadlineOvershoot(b *testing.B) {
	c := corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet, LoadTimeout: time.Hour}))
	defer c.Close()
	stuck := make(chan struct{})
	defer close(stuck)
	ctx := context.Background()
	prefix := "bench:stuck:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	var over time.Duration
	for i := range b.N {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		deadline, _ := cctx.Deadline()
		_, err := c.Fetch(cctx, prefix+strconv.Itoa(i%8), time.Minute, func(context.Context) ([]byte, error) {
			<-stuck
			return nil, nil
		})
		if err == nil {
			b.Fatal("Fetch of a stuck load returned a value")
		}
		over += time.Since(deadline)
		cancel()
	}
	b.ReportMetric(float64(over.Microseconds())/float64(b.N), "overshoot-µs/op")
}

// BenchmarkFetchHitNear is Fetch of warm 1 KiB values served from the near
// cache: no Redis command.
func BenchmarkFetchHitNear(b *testing.B) {
	c := corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet, DisableEarlyRefresh: true,
		NearCache: corral.NearCacheOptions{Size: 2 * hitKeys, TTL: time.Hour}}))
	defer c.Close()
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return benchValue, nil }
	warmNearKeys(b, c, "bench:near:", func(key string) error { _, err := c.Fetch(ctx, key, time.Hour, load); return err })
	b.SetBytes(int64(len(benchValue)))
	b.ReportAllocs()
	b.ResetTimer()
	before := c.Stats()
	parallelKeys(b, "bench:near:", func(key string) {
		if v, err := c.Fetch(ctx, key, time.Hour, load); err != nil || len(v) != len(benchValue) {
			b.Fatal(err)
		}
	})
	after := c.Stats()
	b.ReportMetric(float64(after.NearHits-before.NearHits)/float64(b.N), "near-hits/op")
}

// BenchmarkFetchTypedHitNear is Fetch[T] of the same records as
// BenchmarkFetchTypedHit, served decoded from the near cache.
func BenchmarkFetchTypedHitNear(b *testing.B) {
	c := corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet, DisableEarlyRefresh: true,
		NearCache: corral.NearCacheOptions{Size: 2 * hitKeys, TTL: time.Hour}}))
	defer c.Close()
	ctx := context.Background()
	load := func(context.Context) (benchRecord, error) { return newBenchRecord(), nil }
	warmNearKeys(b, c, "bench:neartyped:", func(key string) error { _, err := corral.Fetch(ctx, c, key, time.Hour, load); return err })
	b.ReportAllocs()
	b.ResetTimer()
	parallelKeys(b, "bench:neartyped:", func(key string) {
		if r, err := corral.Fetch(ctx, c, key, time.Hour, load); err != nil || r.ID != 42 {
			b.Fatal(err)
		}
	})
}

// warmNearKeys fetches the hitKeys keys under prefix until each is held by
// the near cache (its invalidation stream is up, and a copy is stored).
// warmNearKeys fetches the hitKeys keys under prefix until c's near cache
// holds each.
func warmNearKeys(b *testing.B, c *corral.Cache, prefix string, fetch func(key string) error) {
	observetest.WarmKeys(b, c, true, prefix, fetch)
}

// BenchmarkNearInvalidation measures how soon a change made by one instance
// reaches another's near cache: from Set returning in one Cache until the
// other's Fetch (served from memory until then) returns the new value.
func BenchmarkNearInvalidation(b *testing.B) {
	opts := func() *corral.Options {
		return &corral.Options{Logger: quiet, NearCache: corral.NearCacheOptions{Size: 100, TTL: time.Hour}}
	}
	reader := corral.Must(corral.New(benchClient(b), opts()))
	defer reader.Close()
	writer := corral.Must(corral.New(benchClient(b), opts()))
	defer writer.Close()
	ctx := context.Background()
	key := "bench:inval:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	load := func(context.Context) ([]byte, error) { return []byte("loaded"), nil }
	warmNearKeys(b, reader, key, func(k string) error { _, err := reader.Fetch(ctx, k, time.Hour, load); return err })
	key += "0" // the key warmNearKeys warmed first
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		want := "v" + strconv.Itoa(i)
		if err := writer.Set(ctx, key, []byte(want), time.Hour); err != nil {
			b.Fatal(err)
		}
		set := time.Now()
		for {
			v, err := reader.Fetch(ctx, key, time.Hour, load)
			if err != nil {
				b.Fatal(err)
			}
			if string(v) == want {
				break
			}
		}
		lat = append(lat, time.Since(set))
		// Held in memory again before the next change.
		for before := reader.Stats().NearHits; reader.Stats().NearHits == before; {
			reader.Fetch(ctx, key, time.Hour, load)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkStampedeWaiters follows a cold-key stampede the shape of make
// bench's cold-stampede-20ms (8 instances, each its own client and Cache,
// x 250 goroutines, a 20 ms origin) from the holder's load to every
// caller's answer, and reports, as the median over the stampedes, how long
// after the load returned: the holder's callers were answered (p50, in
// µs), and the other instances' callers (first, p50, p99, last); how long
// after the release the load began (load-start, median and max) and the
// last caller entered Fetch (last-in): the burst itself; and the process's
// CPU time per caller over the stampede and after the load returned (the
// harness's own work included). It is where a waiter's time goes
// (docs/design.md, 3.3).
func BenchmarkStampedeWaiters(b *testing.B) {
	for _, origin := range []time.Duration{20 * time.Millisecond, 200 * time.Millisecond} {
		b.Run(origin.String(), func(b *testing.B) { stampedeWaiters(b, origin) })
	}
}

func stampedeWaiters(b *testing.B, originLatency time.Duration) {
	const instances, goroutines = 8, 250
	caches := make([]*corral.Cache, instances)
	for i := range caches {
		caches[i] = corral.Must(corral.New(benchClient(b), &corral.Options{Logger: quiet}))
		defer caches[i].Close()
	}
	ctx := context.Background()
	var holderP50, first, p50, p99, last, loadStart, lastEntered, cpu, cpuAfter []float64
	b.ResetTimer()
	for i := range b.N {
		key := "bench:waiters:" + strconv.Itoa(i) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
		var loaded atomic.Int64        // when the load returned (UnixNano)
		var holder atomic.Int32        // the instance that loaded, plus 1
		var began, lastIn atomic.Int64 // when the load began, the last caller entered (UnixNano)
		var entered atomic.Int32
		var cpuLoaded atomic.Int64 // processCPU when the load returned
		start := make(chan struct{})
		answered := make([][]int64, instances)
		var wg sync.WaitGroup
		for in, c := range caches {
			answered[in] = make([]int64, goroutines)
			for g := range goroutines {
				wg.Go(func() {
					<-start
					if entered.Add(1) == instances*goroutines {
						lastIn.Store(time.Now().UnixNano())
					}
					ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a caller's deadline, as make bench's
					defer cancel()
					_, err := c.Fetch(ctx, key, time.Minute, func(context.Context) ([]byte, error) {
						holder.Store(int32(in) + 1)
						began.Store(time.Now().UnixNano())
						<-time.After(originLatency) // the origin's latency
						loaded.Store(time.Now().UnixNano())
						cpuLoaded.Store(int64(processCPU()))
						return benchValue, nil
					})
					answered[in][g] = time.Now().UnixNano()
					if err != nil {
						b.Error(err)
					}
				})
			}
		}
		cpu0 := processCPU()
		released := time.Now().UnixNano()
		close(start)
		wg.Wait()
		cpuEnd := processCPU()
		cpu = append(cpu, float64(cpuEnd-cpu0)/1e3/(instances*goroutines))
		cpuAfter = append(cpuAfter, float64(cpuEnd-time.Duration(cpuLoaded.Load()))/1e3/(instances*goroutines))
		loadStart = append(loadStart, float64(began.Load()-released)/1e3)
		lastEntered = append(lastEntered, float64(lastIn.Load()-released)/1e3)
		var others []float64
		for in := range caches {
			for _, at := range answered[in] {
				d := float64(at-loaded.Load()) / 1e3
				if in == int(holder.Load())-1 {
					continue
				}
				others = append(others, d)
			}
			if in == int(holder.Load())-1 {
				own := make([]float64, 0, goroutines)
				for _, at := range answered[in] {
					own = append(own, float64(at-loaded.Load())/1e3)
				}
				slices.Sort(own)
				holderP50 = append(holderP50, own[len(own)/2])
			}
		}
		slices.Sort(others)
		first, last = append(first, others[0]), append(last, others[len(others)-1])
		p50, p99 = append(p50, others[len(others)/2]), append(p99, others[len(others)*99/100])
	}
	b.StopTimer()
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(slices.Max(loadStart), "load-start-max-µs")
	b.ReportMetric(median(loadStart), "load-start-µs")
	b.ReportMetric(median(lastEntered), "last-in-µs")
	b.ReportMetric(median(holderP50), "holder-p50-µs")
	b.ReportMetric(median(cpu), "cpu-µs/caller")
	b.ReportMetric(median(cpuAfter), "cpu-after-µs/caller")
	b.ReportMetric(median(first), "waiter-first-µs")
	b.ReportMetric(median(p50), "waiter-p50-µs")
	b.ReportMetric(median(p99), "waiter-p99-µs")
	b.ReportMetric(median(last), "waiter-last-µs")
}

// BenchmarkStampedeJustStarted is a stampede on instances made the moment
// before it (8 instances x 250 goroutines, a 20 ms origin, a cold key):
// New alone, whose warm-up (the pub/sub probe) is still out when the burst
// comes, and New then Ready. It reports how long after the release the load
// began (median and worst stampede) and the callers' p99 from the release
// (median and worst), in µs (docs/design.md, 3.3).
func BenchmarkStampedeJustStarted(b *testing.B) {
	for _, start := range []string{"New", "PING+New", "New+Ready"} {
		b.Run(start, func(b *testing.B) { stampedeJustStarted(b, start) })
	}
}

// stampedeJustStarted is BenchmarkStampedeJustStarted's, each instance made
// as start says: New on a new client; PING+New, on a new client that has
// connected (as make bench connects every system's clients before a
// trial); New+Ready.
func stampedeJustStarted(b *testing.B, start string) {
	const instances, goroutines = 8, 250
	ctx := context.Background()
	var loadStart, p99 []float64
	for i := range b.N {
		caches := make([]*corral.Cache, instances)
		for j := range caches {
			rdb := benchClient(b)
			if start == "PING+New" {
				if err := rdb.Ping(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
			caches[j] = corral.Must(corral.New(rdb, &corral.Options{Logger: quiet}))
			if start == "New+Ready" {
				if err := caches[j].Ready(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		key := "bench:started:" + strconv.Itoa(i) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
		var began atomic.Int64
		start := make(chan struct{})
		answered := make([]int64, instances*goroutines)
		var wg sync.WaitGroup
		for in, c := range caches {
			for g := range goroutines {
				wg.Go(func() {
					<-start
					ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					_, err := c.Fetch(ctx, key, time.Minute, func(context.Context) ([]byte, error) {
						began.Store(time.Now().UnixNano())
						<-time.After(20 * time.Millisecond) // the origin's latency
						return benchValue, nil
					})
					answered[in*goroutines+g] = time.Now().UnixNano()
					if err != nil {
						b.Error(err)
					}
				})
			}
		}
		released := time.Now().UnixNano()
		close(start)
		wg.Wait()
		loadStart = append(loadStart, float64(began.Load()-released)/1e3)
		slices.Sort(answered)
		p99 = append(p99, float64(answered[len(answered)*99/100]-released)/1e3)
		for _, c := range caches {
			c.Close()
		}
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(median(loadStart), "load-start-µs")
	b.ReportMetric(slices.Max(loadStart), "load-start-max-µs")
	b.ReportMetric(median(p99), "p99-µs")
	b.ReportMetric(slices.Max(p99), "p99-max-µs")
	b.ReportMetric(0, "ns/op")
}
