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

// D3: with a tight client-output-buffer-limit for pub/sub, notices carrying
// large values inline got the waiting instance's subscriber dropped, and its
// waiters woke only on their timers. Now large values are not inlined; and
// should a subscriber be dropped all the same (here forced with an inline
// limit above the values and a hard limit below one notice), every waiting
// flight re-checks the moment the subscription comes back. LeaseTTL is 30s:
// no waiter's timer can help.
func TestDegraded_D3_LostNotices(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inline int
		limit  string
	}{
		{"default inline limit", 0, "pubsub 64kb 32kb 60"},
		{"values inlined, subscriber dropped", 32 << 10, "pubsub 8kb 4kb 60"},
	} {
		inline := tc.inline
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, "--client-output-buffer-limit", tc.limit)
			opts := func() *corral.Options { return &corral.Options{LeaseTTL: 30 * time.Second, NoticeInlineLimit: inline} }
			a := newCache(t, srv.Client(), opts())
			b := newCache(t, srv.Client(), opts())
			ctx := context.Background()
			const keys = 40
			value := []byte(strings.Repeat("v", 15<<10))
			var finishes []func()
			for i := range keys {
				finishes = append(finishes, hold(t, a, "{d3:"+strconv.Itoa(i)+"}", value, nil))
			}
			var wg sync.WaitGroup
			var bad atomic.Int32
			var slowest atomic.Int64
			var ended time.Time
			var endedMu sync.Mutex
			for i := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := b.Fetch(ctx, "{d3:"+strconv.Itoa(i)+"}", time.Minute, value_("not me"))
					endedMu.Lock()
					took := time.Since(ended)
					endedMu.Unlock()
					for d := int64(took); ; {
						if old := slowest.Load(); d <= old || slowest.CompareAndSwap(old, d) {
							break
						}
					}
					if err != nil || len(v) != len(value) {
						bad.Add(1)
					}
				}()
			}
			eventually(t, 10*time.Second, "b waits on every key", func() bool { return b.Stats().Waits == keys })
			admin := srv.Client()
			clientIDs := func(typ ...any) []string {
				var ids []string
				list, _ := admin.Do(ctx, append([]any{"CLIENT", "LIST"}, typ...)...).Text()
				for _, f := range strings.Fields(list) {
					if strings.HasPrefix(f, "id=") {
						ids = append(ids, f)
					}
				}
				return ids
			}
			subscriber := clientIDs("TYPE", "pubsub")
			endedMu.Lock()
			ended = time.Now()
			endedMu.Unlock()
			for _, f := range finishes {
				f()
			}
			wg.Wait()
			if bad.Load() > 0 {
				t.Fatalf("%d waiters did not get the value", bad.Load())
			}
			connected := strings.Join(clientIDs(), " ") + " "
			dropped := false
			for _, id := range subscriber {
				dropped = dropped || !strings.Contains(connected, id+" ")
			}
			if dropped != (inline > 0) {
				t.Fatalf("subscriber dropped: %v; want %v", dropped, inline > 0)
			}
			if d := time.Duration(slowest.Load()); d > 2*time.Second {
				t.Fatalf("the slowest waiter answered %v after the loads ended; want at once (not the 30s timer)", d)
			}
			t.Logf("slowest waiter %v after the loads ended", time.Duration(slowest.Load()).Round(time.Millisecond))
		})
	}
}

// value_ is value, for closures where value names a variable.
func value_(s string) func(context.Context) ([]byte, error) { return value(s) }

// D4: the previous release cached {"id":"42"}; this one reads the key as a
// struct with an int ID. The entry does not decode: it is a miss, reloaded
// once for all concurrent callers, and stored anew. A freshly loaded value
// that does not decode is the callers' decode error, not reloaded again.
func TestDegraded_D4_EntriesThatNoLongerDecode(t *testing.T) {
	e := newEnv(t, nil)
	var logged lockedBuffer
	c := newCache(t, e.srv.Client(), &corral.Options{Logger: slogTo(&logged)})
	ctx := context.Background()
	old := newCache(t, e.srv.Client(), nil)
	if err := old.Set(ctx, "user:42", []byte(`{"id":"42"}`), time.Hour); err != nil {
		t.Fatal(err)
	}
	type user struct {
		ID int `json:"id"`
	}
	var loads atomic.Int32
	load := func(context.Context) (user, error) {
		loads.Add(1)
		<-time.After(20 * time.Millisecond) // concurrent callers meet in one load
		return user{ID: 42}, nil
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if u, err := corral.Fetch(ctx, c, "user:42", time.Hour, load); err != nil || u.ID != 42 {
				t.Errorf("Fetch = %+v, %v; want the reloaded value", u, err)
			}
		}()
	}
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads after an entry that does not decode; want 1", n)
	}
	if u, err := corral.Fetch(ctx, c, "user:42", time.Hour, load); err != nil || u.ID != 42 || loads.Load() != 1 {
		t.Fatalf("after the reload: %+v, %v, %d loads; want a hit", u, err, loads.Load())
	}
	if st := c.Stats(); st.DecodeFailures == 0 {
		t.Fatalf("stats %+v; want the decode failures counted", st)
	}
	if n := strings.Count(logged.String(), "does not decode"); n != 1 {
		t.Fatalf("%d warnings; want one per key:\n%s", n, logged.String())
	}

	// A codec whose output does not decode: the fresh load's callers get the
	// decode error, and the loader is not run again for them.
	bad := newCache(t, e.srv.Client(), &corral.Options{Codec: brokenCodec{}})
	loads.Store(0)
	if _, err := corral.Fetch(ctx, bad, "fresh", time.Hour, load); err == nil || !strings.Contains(err.Error(), "decode") || loads.Load() != 1 {
		t.Fatalf("a fresh value that does not decode: %v after %d loads; want the decode error after 1", err, loads.Load())
	}
}

// brokenCodec writes what it cannot read back.
type brokenCodec struct{}

func (brokenCodec) Marshal(any) ([]byte, error) { return []byte("not json"), nil }
func (brokenCodec) Unmarshal([]byte, any) error { return errors.New("brokenCodec cannot decode") }

// D4 with CodecVersion: a release that raised it takes entries of the older
// version as missing and stores them anew, once; the older release, meeting
// an entry of the newer version during a rolling deploy, loads without
// storing and leaves the entry to the newer release.
func TestDegraded_D4_CodecVersion(t *testing.T) {
	e := newEnv(t, nil)
	v1 := newCache(t, e.srv.Client(), &corral.Options{CodecVersion: 1})
	v2 := newCache(t, e.srv.Client(), &corral.Options{CodecVersion: 2})
	ctx := context.Background()
	var loads atomic.Int32
	load := func(s string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			loads.Add(1)
			return s, nil
		}
	}
	if v, err := corral.Fetch(ctx, v1, "k", time.Hour, load("one")); err != nil || v != "one" {
		t.Fatal(v, err)
	}
	for range 3 { // the newer release reloads once, then hits
		if v, err := corral.Fetch(ctx, v2, "k", time.Hour, load("two")); err != nil || v != "two" {
			t.Fatalf("v2 Fetch = %q, %v", v, err)
		}
	}
	if n := loads.Load(); n != 2 {
		t.Fatalf("%d loads; want 2 (v1's, then v2's reload of the old entry)", n)
	}
	for range 3 { // the older release loads without storing over v2's entry
		if v, err := corral.Fetch(ctx, v1, "k", time.Hour, load("one again")); err != nil || v != "one again" {
			t.Fatalf("v1 Fetch = %q, %v", v, err)
		}
	}
	if v, err := corral.Fetch(ctx, v2, "k", time.Hour, load("three")); err != nil || v != "two" {
		t.Fatalf("v2 after v1 read: %q, %v; want its own entry, untouched", v, err)
	}
}
