package corral_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"
)

// BenchmarkHitFloor is what the hit path costs before corral's own work:
// the same commands a peek sends (TIME and HMGET of the entry's fields,
// pipelined), straight through go-redis; beside them, a lone HMGET and a
// GET, over the same 1,000 keys of 1 KiB.
func BenchmarkHitFloor(b *testing.B) {
	rdb := benchClient(b)
	ctx := context.Background()
	value := bytes.Repeat([]byte("x"), 1024)
	for i := range hitKeys {
		rdb.HSet(ctx, "bench:floor:"+strconv.Itoa(i), "v", value, "s", "99999999999999", "d", "1.5", "f", "")
	}
	b.ReportAllocs()
	b.Run("pipe-time-hmget", func(b *testing.B) {
		parallelKeys(b, "bench:floor:", func(key string) {
			p := rdb.Pipeline()
			p.Time(ctx)
			c := p.HMGet(ctx, key, "s", "d", "f", "v", "z")
			p.Exec(ctx)
			if c.Err() != nil {
				b.Fatal(c.Err())
			}
		})
	})
	b.Run("hmget", func(b *testing.B) {
		parallelKeys(b, "bench:floor:", func(key string) {
			if err := rdb.HMGet(ctx, key, "s", "d", "f", "v", "z").Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("get", func(b *testing.B) {
		for i := range hitKeys {
			rdb.Set(ctx, "bench:floorget:"+strconv.Itoa(i), value, 0)
		}
		parallelKeys(b, "bench:floorget:", func(key string) {
			if err := rdb.Get(ctx, key).Err(); err != nil {
				b.Fatal(err)
			}
		})
	})
}
