package corral_test

import (
	"bytes"
	"context"
	"strconv"
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
// them; and corralotel with no tracing (metrics only, on the SDK).
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
}

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
