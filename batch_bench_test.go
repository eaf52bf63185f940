package corral_test

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// BenchmarkFetchMany reads batchKeys warm keys per op: with one FetchMany
// ("FetchMany"), and with as many Fetch calls one after another ("Fetch"),
// the baseline, on the same client and values; each client kind as in the
// hit benchmarks. The ratio of their ns/op is what batching saves; ns/key
// is the cost per key.
func BenchmarkFetchMany(b *testing.B) {
	const batchKeys = 100
	clients := []struct {
		name   string
		client func(*testing.B) *redis.Client
	}{{"inline", benchClient}, {"default", func(b *testing.B) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		b.Cleanup(func() { rdb.Close() })
		return rdb
	}}}
	for _, cl := range clients {
		c := corral.Must(corral.New(cl.client(b), &corral.Options{Logger: quiet, DisableEarlyRefresh: true}))
		ctx := context.Background()
		keys := keyRange("bench:many:", 0, batchKeys)
		loadMany := func(ctx context.Context, missing []string) (map[string][]byte, error) {
			vals := make(map[string][]byte, len(missing))
			for _, k := range missing {
				vals[k] = benchValue
			}
			return vals, nil
		}
		if _, err := c.FetchMany(ctx, keys, time.Hour, loadMany); err != nil {
			b.Fatal(err)
		}
		load := func(context.Context) ([]byte, error) { return benchValue, nil }
		b.Run(cl.name+"/Fetch", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, k := range keys {
					if v, err := c.Fetch(ctx, k, time.Hour, load); err != nil || len(v) != len(benchValue) {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchKeys), "ns/key")
		})
		b.Run(cl.name+"/FetchMany", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				vals, err := c.FetchMany(ctx, keys, time.Hour, loadMany)
				if err != nil || len(vals) != batchKeys {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batchKeys), "ns/key")
		})
		c.Close()
	}
}
