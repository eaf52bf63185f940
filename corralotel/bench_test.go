package corralotel_test

import (
	"context"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// benchCall measures what the Observer does for one call answered by a
// near hit, without the Cache: the call's scope, its outcome, its end.
func benchCall(b *testing.B, tp trace.TracerProvider) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	o, _ := corralotel.New(&corralotel.Options{TracerProvider: tp, MeterProvider: mp})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c := o.Start(ctx, corral.Event{Kind: corral.EventFetchStart, Prefix: "p", Key: "k"})
		o.Observe(c, corral.Event{Kind: corral.EventNearHit, Prefix: "p", Key: "k"})
		o.Observe(c, corral.Event{Kind: corral.EventFetchEnd, Prefix: "p", Key: "k", Duration: 100})
	}
}

// BenchmarkObserveCall: with a TracerProvider that does nothing (metrics
// only, on the SDK), and with the SDK's, every span sampled and batched to
// an exporter that drops them.
func BenchmarkObserveCall(b *testing.B) {
	b.Run("noop-tracer", func(b *testing.B) { benchCall(b, noop.NewTracerProvider()) })
	b.Run("sdk-tracer", benchCallSDK)
}

func benchCallSDK(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(context.Background())
	benchCall(b, tp)
}
