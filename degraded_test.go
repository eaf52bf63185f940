package corral_test

// Degraded Redis: a server that still answers, but refuses writes, lacks
// rights, drops subscribers, evicts keys, or holds entries a release can no
// longer decode. Each test runs a redis-server configured for its fault.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// fillUntilOOM writes filler keys until Redis refuses even the smallest
// write (maxmemory reached under noeviction), with ever smaller values: a
// large write refused can leave room for a small one.
func fillUntilOOM(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	i := 0
	for _, size := range []int{64 << 10, 4 << 10, 256, 1} {
		filler := strings.Repeat("f", size)
		for ; ; i++ {
			err := rdb.Set(ctx, "filler:"+strconv.Itoa(i), filler, 0).Err()
			if err != nil && strings.HasPrefix(err.Error(), "OOM") {
				break
			}
			if err != nil || i > 1_000_000 {
				t.Fatalf("filling Redis: %v after %d keys", err, i)
			}
		}
	}
}

// D1: Redis is out of memory under noeviction and refuses every write. Hits
// and stale values are still served from Redis in one round trip; only
// misses load, once per key in the process; the breaker stays closed, and
// Stats and the log say that writes are refused.
func TestDegraded_D1_OutOfMemory(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	var logged lockedBuffer
	c := newCache(t, srv.Client(), &corral.Options{StaleTTL: time.Minute, DisableJitter: true,
		Logger: slogTo(&logged)})
	admin := srv.Client()
	ctx := context.Background()
	var loads atomic.Int32
	load := func(v string) func(context.Context) ([]byte, error) {
		return func(context.Context) ([]byte, error) {
			loads.Add(1)
			return []byte(v), nil
		}
	}
	if _, err := c.Fetch(ctx, "{hot}", time.Hour, load("hot")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "{stale}", 50*time.Millisecond, load("old")); err != nil {
		t.Fatal(err)
	}
	waitStale(t, admin, entryName("{stale}"))
	fillUntilOOM(t, admin)
	loads.Store(0)

	for range 20 {
		if v, err := c.Fetch(ctx, "{hot}", time.Hour, load("reloaded")); err != nil || string(v) != "hot" {
			t.Fatalf("hot key under OOM = %q, %v; want the cached value", v, err)
		}
	}
	for range 5 {
		if v, err := c.Fetch(ctx, "{stale}", time.Hour, load("new")); err != nil || string(v) != "old" {
			t.Fatalf("stale key under OOM = %q, %v; want the stale value", v, err)
		}
	}
	if n := loads.Load(); n != 0 {
		t.Fatalf("%d loads for cached keys under OOM; want 0 (stats %+v; log %s)", n, c.Stats(), logged.String())
	}
	// Misses load once per key in this process, concurrent callers sharing it.
	var wg sync.WaitGroup
	for k := range 6 {
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "{miss" + strconv.Itoa(k) + "}"
				if v, err := c.Fetch(ctx, key, time.Hour, slowLoad(&loads, "m")); err != nil || string(v) != "m" {
					t.Errorf("miss under OOM = %q, %v", v, err)
				}
			}()
		}
	}
	wg.Wait()
	if n := loads.Load(); n > 6 {
		t.Fatalf("%d loads for 6 missing keys under OOM; want at most one each", n)
	}
	if err := c.Set(ctx, "{hot}", []byte("x"), time.Hour); !errors.Is(err, corral.ErrWriteRefused) {
		t.Fatalf("Set under OOM = %v; want ErrWriteRefused", err)
	}
	if v, err := c.Get(ctx, "{hot}"); err != nil || string(v) != "hot" {
		t.Fatalf("Get under OOM = %q, %v", v, err)
	}
	st := c.Stats()
	if st.WritesRefused == 0 || st.BreakerOpens != 0 || st.BreakerOpen {
		t.Fatalf("stats %+v; want refused writes counted and the breaker closed", st)
	}
	if !strings.Contains(logged.String(), "refuses writes") {
		t.Fatalf("the log does not say writes are refused:\n%s", logged.String())
	}
}

// slowLoad counts its runs and returns v after a moment, so that concurrent
// callers meet in one flight.
func slowLoad(n *atomic.Int32, v string) func(context.Context) ([]byte, error) {
	return slow(20*time.Millisecond, n, v)
}

// slogTo returns a logger that writes text to w.
func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
