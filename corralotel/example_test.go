package corralotel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralotel"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// An Observer traces each Fetch call and each load, inside the caller's
// span; the loader's own spans nest in the load's. This function's body is
// the main of docs/observability.md's "Tracing with OpenTelemetry" (with redisAddr for
// "localhost:6379"); TestReadme keeps the two the same.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	// The SDK, exporting to memory here; a service exports over OTLP, and
	// may leave Options nil to use otel's global providers.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(ctx)

	obs, err := corralotel.New(&corralotel.Options{TracerProvider: tp}) // metrics: otel's global MeterProvider
	if err != nil {
		log.Fatal(err)
	}
	// The StatsReader beside obs gives it what only Stats knows (outage
	// time, pending invalidations).
	cache, err := corral.New(rdb, &corral.Options{Prefix: "shop", Observer: corral.MultiObserver(obs, obs.StatsReader())})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	tracer := tp.Tracer("shop")
	ctx, request := tracer.Start(ctx, "GET /products/7")
	load := func(ctx context.Context) ([]byte, error) {
		_, query := tracer.Start(ctx, "SELECT product 7") // ctx holds the load's span
		defer query.End()
		return []byte("Lamp"), nil
	}
	for range 2 {
		if _, err := cache.Fetch(ctx, "product:7", time.Minute, load); err != nil {
			log.Fatal(err)
		}
	}
	request.End()

	names := map[string]string{} // span ID -> name
	for _, s := range spans.GetSpans() {
		names[s.SpanContext.SpanID().String()] = s.Name
	}
	for _, s := range spans.GetSpans() {
		fmt.Printf("%s, in %q", s.Name, names[s.Parent.SpanID().String()])
		for _, a := range s.Attributes {
			if a.Key == "corral.outcome" {
				fmt.Printf(", %s", a.Value.Emit())
			}
		}
		fmt.Println()
	}
	cache.Delete(ctx, "product:7") // so that the next run starts cold
	// Output:
	// SELECT product 7, in "corral.load"
	// corral.load, in "corral.fetch"
	// corral.fetch, in "GET /products/7", miss
	// corral.fetch, in "GET /products/7", hit
	// GET /products/7, in ""
}
