package corralprom_test

import (
	"context"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralprom"
)

// BenchmarkObserveHit measures what the Collector does for a hit, without
// the Cache: one Observe of an outcome (BenchmarkFetchHitObserved, in the
// root package, measures it within Fetch).
func BenchmarkObserveHit(b *testing.B) {
	col, err := corralprom.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	var o corral.Observer = col
	ctx := context.Background()
	e := corral.Event{Kind: corral.EventHit, Prefix: "p", Key: "k"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Observe(ctx, e)
		}
	})
}
