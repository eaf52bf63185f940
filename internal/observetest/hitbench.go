package observetest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// The adapters' hit benchmarks (BenchmarkFetchHitObserved and
// BenchmarkObserverCost in corralprom and corralotel) measure what an
// Observer costs a hit: a Cache with the Observer against one without, in
// the same run, on the redis-server their TestMain starts. They live with
// the adapters, whose modules bring Prometheus and OpenTelemetry; what the
// two have in common is here, which needs neither.

// BenchObserver is an Observer the hit benchmarks compare, by name. New
// makes a fresh one for each sub-benchmark.
type BenchObserver struct {
	Name string
	New  func(b *testing.B) corral.Observer
}

// BenchObservers returns the Observers a hit benchmark compares: none; the
// adapter's own; one that does nothing (what the core's side costs); and
// none again (an A/A comparison: the method's own noise).
func BenchObservers(own ...BenchObserver) []BenchObserver {
	none := func(*testing.B) corral.Observer { return nil }
	all := []BenchObserver{{"none", none}}
	all = append(all, own...)
	return append(all, BenchObserver{"nop", func(*testing.B) corral.Observer { return nopObserver{} }},
		BenchObserver{"none-again", none})
}

// nopObserver does nothing: what an Observer costs the core itself.
type nopObserver struct{}

func (nopObserver) Observe(context.Context, corral.Event) {}

// HitBench runs the hit benchmarks against one redis-server.
type HitBench struct {
	// Addr is the redis-server's host:port.
	Addr string
	// Parallelism is the goroutines per CPU (b.SetParallelism); the
	// adapters' -hit.parallelism flag, 1 by default: a service serves many
	// requests at once, as -hit.parallelism=16 shows.
	Parallelism int
}

// hitKeys is how many distinct warm keys the hit benchmarks cycle through,
// so that in-process coalescing does not flatter corral.
const hitKeys = 1000

// hitValue is the benchmarks' value, 1 KiB.
var hitValue = bytes.Repeat([]byte("x"), 1024)

// quiet is the Caches' logger: a benchmark has no *testing.T to log to.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// FetchHitObserved runs the 1 KiB hit from Redis (read inline) and the hit
// from memory (the near cache) with each of observers: the ratio of each to
// "none", in the same run, is what observing costs a hit.
func (h HitBench) FetchHitObserved(b *testing.B, observers []BenchObserver) {
	for _, near := range []bool{false, true} {
		where := "redis"
		if near {
			where = "near"
		}
		for _, o := range observers {
			b.Run(where+"/"+o.Name, func(b *testing.B) {
				h.fetchHitObserved(b, near, "bench:observed:"+where+":"+o.Name+":", o.New(b))
			})
		}
	}
}

func (h HitBench) fetchHitObserved(b *testing.B, near bool, prefix string, obs corral.Observer) {
	c := h.newCache(b, near, obs)
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return hitValue, nil }
	fetch := func(key string) error { _, err := c.Fetch(ctx, key, time.Hour, load); return err }
	h.warm(b, c, near, prefix, fetch)
	b.SetBytes(int64(len(hitValue)))
	b.ReportAllocs()
	b.ResetTimer()
	h.parallelKeys(b, prefix, func(key string) {
		if v, err := c.Fetch(ctx, key, time.Hour, load); err != nil || len(v) != len(hitValue) {
			b.Fatal(err)
		}
	})
}

// newCache returns a Cache with obs on a client of its own, go-redis with
// ContextTimeoutEnabled as the README recommends (corral then reads hits
// in the calling goroutine), closed when b ends.
func (h HitBench) newCache(b *testing.B, near bool, obs corral.Observer) *corral.Cache {
	rdb := redis.NewClient(&redis.Options{Addr: h.Addr, ContextTimeoutEnabled: true})
	opts := &corral.Options{Logger: quiet, DisableEarlyRefresh: true, Observer: obs}
	if near {
		opts.NearCache = corral.NearCacheOptions{Size: 2 * hitKeys, TTL: time.Hour}
	}
	c := corral.Must(corral.New(rdb, opts))
	b.Cleanup(func() {
		c.Close()
		rdb.Close()
	})
	return c
}

// warm is WarmKeys.
func (h HitBench) warm(b *testing.B, c *corral.Cache, near bool, prefix string, fetch func(key string) error) {
	WarmKeys(b, c, near, prefix, fetch)
}

// WarmKeys fetches the hit benchmarks' 1,000 keys under prefix; with near,
// until each is held by c's near cache (its invalidation stream is up, and
// a copy is stored). The root package's hit benchmarks use it too.
func WarmKeys(b *testing.B, c *corral.Cache, near bool, prefix string, fetch func(key string) error) {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < hitKeys; {
		key := prefix + strconv.Itoa(i)
		before := c.Stats().NearHits
		if err := fetch(key); err != nil {
			b.Fatal(err)
		}
		if !near {
			i++
			continue
		}
		if err := fetch(key); err != nil {
			b.Fatal(err)
		}
		if c.Stats().NearHits > before {
			i++
		} else if time.Now().After(deadline) {
			b.Fatal("the near cache does not hold the keys")
		}
	}
}

// parallelKeys is ParallelKeys at h's parallelism.
func (h HitBench) parallelKeys(b *testing.B, prefix string, f func(key string)) {
	ParallelKeys(b, h.Parallelism, prefix, f)
}

// ParallelKeys runs f over the hit benchmarks' 1,000 keys named by prefix
// in parallel (b.SetParallelism(parallelism)), each goroutine starting at
// its own place in the cycle. The root package's hit benchmarks use it too.
func ParallelKeys(b *testing.B, parallelism int, prefix string, f func(key string)) {
	keys := make([]string, hitKeys)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	var next atomic.Int64
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919)) // a prime stride: goroutines spread over the keys
		for pb.Next() {
			f(keys[i%hitKeys])
			i++
		}
	})
}

// ObserverCost measures the ratios of FetchHitObserved in a way that
// survives a busy machine: two Caches, one without an Observer and one with
// (each its own client and warm keys), run side by side, each goroutine
// switching from one to the other every observerBlock hits, so whatever
// else the machine does falls on both alike. It reports each one's ns per
// hit and their ratio (x-none), for each of observers but the first, which
// is the one without.
func (h HitBench) ObserverCost(b *testing.B, observers []BenchObserver) {
	for _, near := range []bool{false, true} {
		where := "redis"
		if near {
			where = "near"
		}
		for _, o := range observers[1:] {
			b.Run(where+"/"+o.Name, func(b *testing.B) {
				costs := h.observerCost(b, near, observers[0].New(b), o.New(b))
				if costs == nil {
					return
				}
				b.ReportMetric(costs[0], "none-ns/hit")
				b.ReportMetric(costs[1], o.Name+"-ns/hit")
				b.ReportMetric(costs[1]/costs[0], "x-none")
			})
		}
	}
}

// observerBlock is how many hits a goroutine of ObserverCost makes on one
// Cache before it moves to the other.
const observerBlock = 64

// observerCost runs hits on one Cache per Observer, in turns of
// observerBlock hits per goroutine, and returns each one's ns per hit as a
// goroutine saw it (its latency), from its median block.
func (h HitBench) observerCost(b *testing.B, near bool, observers ...corral.Observer) []float64 {
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return hitValue, nil }
	caches := make([]*corral.Cache, len(observers))
	keys := make([][]string, len(observers))
	for i, obs := range observers {
		c := h.newCache(b, near, obs)
		caches[i] = c
		prefix := "bench:cost:" + strconv.FormatBool(near) + ":" + strconv.Itoa(i) + ":"
		h.warm(b, c, near, prefix, func(key string) error { _, err := c.Fetch(ctx, key, time.Hour, load); return err })
		for k := range hitKeys {
			keys[i] = append(keys[i], prefix+strconv.Itoa(k))
		}
	}
	b.ReportAllocs()
	b.SetParallelism(h.Parallelism)
	b.ResetTimer()
	blocks := inTurns(b, len(caches), func(v, k int) {
		if _, err := caches[v].Fetch(ctx, keys[v][k%hitKeys], time.Hour, load); err != nil {
			b.Fatal(err)
		}
	})
	b.StopTimer()
	costs := make([]float64, len(caches))
	for i, d := range blocks {
		if len(d) == 0 {
			return nil // b.N too small for a block on each (the first, probing run)
		}
		slices.Sort(d)
		costs[i] = float64(d[len(d)/2]) / observerBlock
	}
	return costs
}

// inTurns runs hit(v, k) in parallel, each goroutine on one of n Caches
// (v) for observerBlock hits of consecutive keys (k), then on the next, and
// returns each block's time, by Cache.
func inTurns(b *testing.B, n int, hit func(v, k int)) [][]time.Duration {
	var mu sync.Mutex
	blocks := make([][]time.Duration, n)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		g := int(next.Add(1))
		k, v, i := g*7919, g%n, 0
		mine := make([][]time.Duration, n)
		start := time.Now()
		for pb.Next() {
			hit(v, k)
			k++
			if i++; i == observerBlock {
				now := time.Now()
				mine[v] = append(mine[v], now.Sub(start))
				v, i, start = (v+1)%n, 0, now
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for j := range blocks {
			blocks[j] = append(blocks[j], mine[j]...)
		}
	})
	return blocks
}
