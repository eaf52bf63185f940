package corralotel_test

import (
	"context"
	"flag"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralotel"
	"github.com/corralhq/corral/internal/observetest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// hitParallelism is the hit benchmarks' goroutines per CPU
// (b.SetParallelism): 1 by default; a service serves many requests at once,
// as -hit.parallelism=16 shows.
var hitParallelism = flag.Int("hit.parallelism", 1, "goroutines per CPU in the hit benchmarks")

// benchObservers are the Observers the hit benchmarks compare: none; the
// Observer on the SDK, every call's span sampled and batched to an exporter
// that drops them; the Observer with no tracing (metrics only, on the SDK);
// one that does nothing; none again.
var benchObservers = observetest.BenchObservers(
	observetest.BenchObserver{Name: "otel", New: func(b *testing.B) corral.Observer {
		return benchOtel(b, sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter())))
	}},
	observetest.BenchObserver{Name: "otel-metrics", New: func(b *testing.B) corral.Observer {
		return benchOtel(b, noop.NewTracerProvider())
	}},
)

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

func hitBench() observetest.HitBench {
	return observetest.HitBench{Addr: redisAddr, Parallelism: *hitParallelism}
}

// BenchmarkFetchHitObserved is corral's 1 KiB hit from Redis (read inline)
// and from memory (the near cache), with each of benchObservers: the ratio
// of each to "none", in the same run, is what observing costs a hit.
func BenchmarkFetchHitObserved(b *testing.B) { hitBench().FetchHitObserved(b, benchObservers) }

// BenchmarkObserverCost measures the same ratios in a way that survives a
// busy machine: a Cache with the Observer and one without, side by side, in
// turns (observetest.HitBench.ObserverCost).
func BenchmarkObserverCost(b *testing.B) { hitBench().ObserverCost(b, benchObservers) }
