package corral_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralotel"
	"github.com/corralhq/corral/corralprom"
	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// benchObservers are the Observers the observed hit benchmarks compare:
// none; corralprom's Collector, registered; corralotel's Observer on the
// SDK, every call's span sampled and batched to an exporter that drops
// them; corralotel with no tracing (metrics only, on the SDK); one that
// does nothing (what the core's side costs); and none again.
var benchObservers = []struct {
	name string
	new  func(b *testing.B) corral.Observer
}{
	{"none", func(*testing.B) corral.Observer { return nil }},
	{"prom", func(b *testing.B) corral.Observer {
		col, err := corralprom.New(nil)
		if err != nil {
			b.Fatal(err)
		}
		prometheus.NewRegistry().MustRegister(col)
		return col
	}},
	{"otel", func(b *testing.B) corral.Observer {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		return benchOtel(b, tp)
	}},
	{"otel-metrics", func(b *testing.B) corral.Observer { return benchOtel(b, noop.NewTracerProvider()) }},
	{"nop", func(*testing.B) corral.Observer { return nopObserver{} }},
	{"none-again", func(*testing.B) corral.Observer { return nil }}, // an A/A comparison: the method's own noise
}

// nopObserver does nothing: what an Observer costs the core itself.
type nopObserver struct{}

func (nopObserver) Observe(context.Context, corral.Event) {}

func benchOtel(b *testing.B, tp trace.TracerProvider) corral.Observer {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		if s, ok := tp.(interface{ Shutdown(context.Context) error }); ok {
			s.Shutdown(context.Background())
		}
		mp.Shutdown(context.Background())
	})
	obs, err := corralotel.New(&corralotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	return obs
}

// BenchmarkFetchHitObserved is BenchmarkFetchHit's 1 KiB hit from Redis
// (read inline) and BenchmarkFetchHitNear's hit from memory, with each of
// benchObservers: the ratio of each to "none", in the same run, is what
// observing costs a hit.
func BenchmarkFetchHitObserved(b *testing.B) {
	for _, near := range []bool{false, true} {
		where := "redis"
		if near {
			where = "near"
		}
		for _, o := range benchObservers {
			b.Run(where+"/"+o.name, func(b *testing.B) {
				opts := &corral.Options{Logger: quiet, DisableEarlyRefresh: true, Observer: o.new(b)}
				if near {
					opts.NearCache = corral.NearCacheOptions{Size: 2 * hitKeys, TTL: time.Hour}
				}
				c := corral.Must(corral.New(benchClient(b), opts))
				defer c.Close()
				ctx := context.Background()
				value := bytes.Repeat([]byte("x"), 1024)
				load := func(context.Context) ([]byte, error) { return value, nil }
				prefix := "bench:observed:" + where + ":" + o.name + ":"
				fetch := func(key string) error { _, err := c.Fetch(ctx, key, time.Hour, load); return err }
				if near {
					warmNearKeys(b, c, prefix, fetch)
				} else {
					for i := range hitKeys {
						if err := fetch(prefix + strconv.Itoa(i)); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.SetBytes(int64(len(value)))
				b.ReportAllocs()
				b.ResetTimer()
				parallelKeys(b, prefix, func(key string) {
					if v, err := c.Fetch(ctx, key, time.Hour, load); err != nil || len(v) != len(value) {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// BenchmarkObserverCost measures the ratios of BenchmarkFetchHitObserved
// in a way that survives a busy machine: two Caches, one without an
// Observer and one with (each its own client and warm keys), run side by
// side, each goroutine switching from one to the other every
// observerBlock hits, so whatever else the machine does falls on both
// alike. It reports each one's ns per hit and their ratio (x-none).
func BenchmarkObserverCost(b *testing.B) {
	for _, near := range []bool{false, true} {
		where := "redis"
		if near {
			where = "near"
		}
		for _, o := range benchObservers[1:] {
			b.Run(where+"/"+o.name, func(b *testing.B) {
				costs := observerCost(b, near, benchObservers[0].new(b), o.new(b))
				if costs == nil {
					return
				}
				b.ReportMetric(costs[0], "none-ns/hit")
				b.ReportMetric(costs[1], o.name+"-ns/hit")
				b.ReportMetric(costs[1]/costs[0], "x-none")
			})
		}
	}
}

// observerCost runs hits on one Cache per Observer, in turns of
// observerBlock hits per goroutine, and returns each one's ns per hit as a
// goroutine saw it (its latency), from its median block.
func observerCost(b *testing.B, near bool, observers ...corral.Observer) []float64 {
	ctx := context.Background()
	load := func(context.Context) ([]byte, error) { return benchValue, nil }
	caches := make([]*corral.Cache, len(observers))
	keys := make([][]string, len(observers))
	for i, obs := range observers {
		opts := &corral.Options{Logger: quiet, DisableEarlyRefresh: true, Observer: obs}
		if near {
			opts.NearCache = corral.NearCacheOptions{Size: 2 * hitKeys, TTL: time.Hour}
		}
		c := corral.Must(corral.New(benchClient(b), opts))
		b.Cleanup(func() { c.Close() })
		caches[i] = c
		prefix := "bench:cost:" + strconv.FormatBool(near) + ":" + strconv.Itoa(i) + ":"
		fetch := func(key string) error { _, err := c.Fetch(ctx, key, time.Hour, load); return err }
		if near {
			warmNearKeys(b, c, prefix, fetch)
		}
		for k := range hitKeys {
			keys[i] = append(keys[i], prefix+strconv.Itoa(k))
			if err := fetch(keys[i][k]); err != nil {
				b.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	blocks := make([][]time.Duration, len(caches)) // each block's time, by Cache
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(*hitParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(next.Add(1))
		k, v, n := g*7919, g%len(caches), 0
		mine := make([][]time.Duration, len(caches))
		start := time.Now()
		for pb.Next() {
			if _, err := caches[v].Fetch(ctx, keys[v][k%hitKeys], time.Hour, load); err != nil {
				b.Fatal(err)
			}
			k++
			if n++; n == observerBlock {
				now := time.Now()
				mine[v] = append(mine[v], now.Sub(start))
				v, n, start = (v+1)%len(caches), 0, now
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range blocks {
			blocks[i] = append(blocks[i], mine[i]...)
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

// observerBlock is how many hits a goroutine of BenchmarkObserverCost makes
// on one Cache before it moves to the other.
const observerBlock = 64
