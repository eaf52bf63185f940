package corralprom_test

import (
	"flag"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralprom"
	"github.com/corralhq/corral/internal/observetest"
	"github.com/prometheus/client_golang/prometheus"
)

// hitParallelism is the hit benchmarks' goroutines per CPU
// (b.SetParallelism): 1 by default; a service serves many requests at once,
// as -hit.parallelism=16 shows.
var hitParallelism = flag.Int("hit.parallelism", 1, "goroutines per CPU in the hit benchmarks")

// benchObservers are the Observers the hit benchmarks compare: none; the
// Collector, registered; one that does nothing; none again.
var benchObservers = observetest.BenchObservers(observetest.BenchObserver{Name: "prom", New: func(b *testing.B) corral.Observer {
	col, err := corralprom.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	prometheus.NewRegistry().MustRegister(col)
	return col
}})

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
