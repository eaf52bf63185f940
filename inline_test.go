package corral_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// contextBound makes a client bound its I/O by the context's deadline: corral
// then reads hits in the caller's goroutine, on an estimate of the server's
// clock (internal/transport/inline.go).
func contextBound(o *redis.Options) { o.ContextTimeoutEnabled = true }

// Hits read inline decide on the server's clock: an entry is never served
// once the server's clock has passed its soft expiry (no stale window here:
// not even as stale in the millisecond before Redis expires the key).
func TestInline_ExpiryOnTheServersClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	c := newCache(t, srv.Client(contextBound), &corral.Options{DisableJitter: true, DisableEarlyRefresh: true})
	ctx := context.Background()
	serverMs := func() int64 {
		tm, err := admin.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	const ttl = 300 * time.Millisecond
	total := 0
	for round := range 5 {
		if err := c.Set(ctx, "k", []byte("old"), ttl); err != nil {
			t.Fatal(err)
		}
		expires := serverMs() + ttl.Milliseconds() // no earlier than the entry's soft expiry
		hits := 0
		for deadline := time.Now().Add(10 * time.Second); ; {
			before := serverMs()
			v, err := c.Fetch(ctx, "k", ttl, value("new"))
			if err != nil {
				t.Fatal(err)
			}
			if string(v) == "new" {
				break
			}
			if before >= expires {
				t.Fatalf("round %d: served as fresh at server time %d ms, after the entry expired (at %d ms at the latest)", round, before, expires)
			}
			hits++
			if time.Now().After(deadline) {
				t.Fatal("the entry never expired")
			}
		}
		// A round without a hit is one whose first Fetch came after the
		// expiry (a process starved of CPU between Set and Fetch): it
		// checks nothing, and is not a failure.
		t.Logf("round %d: %d hits before the entry expired", round, hits)
		total += hits
	}
	if total == 0 {
		t.Fatal("no hit before the entry expired in any round: the test checked nothing")
	}
}

// Warm hits through a server pause longer than an inline read's bound: the
// reads under way go on through the pipeline, which waits for the server;
// every caller gets the cached value, nothing is loaded, nothing fails open.
func TestInline_WarmHitsThroughAPause(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	caches := processes(t, srv, 4, nil, contextBound)
	ctx := context.Background()
	for _, c := range caches {
		if _, err := c.Fetch(ctx, "{warm}", time.Hour, value("w")); err != nil {
			t.Fatal(err)
		}
	}
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("loaded"), nil }
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "700", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, c := range caches {
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if v, err := c.Fetch(ctx, "{warm}", time.Hour, load); err != nil || string(v) != "w" {
						t.Errorf("Fetch through a pause = %q, %v; want the cached value", v, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if n := loads.Load(); n != 0 {
		t.Fatalf("%d loads of a cached key through a 700ms pause; want 0", n)
	}
	noFailOpen(t, caches)
}
