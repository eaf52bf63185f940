package corralprom_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// A Collector is registered with Prometheus and set as the Caches'
// Observer. This function's body is the main of docs/observability.md's
// "Metrics with Prometheus" (with redisAddr for "localhost:6379"); TestReadme keeps the
// two the same.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close()

	metrics, err := corralprom.New(nil) // nil: default buckets
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	reg.MustRegister(metrics)

	cache, err := corral.New(rdb, &corral.Options{Prefix: "shop", Observer: metrics})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	load := func(ctx context.Context) ([]byte, error) { return []byte("Lamp"), nil }
	for range 3 {
		if _, err := cache.Fetch(ctx, "product:7", time.Minute, load); err != nil {
			log.Fatal(err)
		}
	}

	// A service serves the registry:
	//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// Here, one scrape, and the calls' outcomes in it:
	scrape := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(scrape, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.Lines(scrape.Body.String()) {
		if strings.HasPrefix(line, "corral_fetches_total{") && !strings.HasSuffix(line, " 0\n") {
			fmt.Print(line)
		}
	}
	cache.Delete(ctx, "product:7") // so that the next run starts cold
	// Output:
	// corral_fetches_total{outcome="hit",prefix="shop"} 2
	// corral_fetches_total{outcome="miss",prefix="shop"} 1
}
