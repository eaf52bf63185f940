package corral_test

// Degraded Redis: a server that still answers, but refuses writes, lacks
// rights, drops subscribers, evicts keys, or holds entries a release can no
// longer decode. Each test runs a redis-server configured for its fault.

import (
	"context"
	crand "crypto/rand"
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
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// outOfMemory puts Redis out of memory under noeviction, to stay: its
// maxmemory becomes half the memory it uses, so every write is refused with
// OOM while reads work. (Filled to the brim instead, Redis made room again
// now and then as it shrank its client buffers in the background, and a
// write went through.)
func outOfMemory(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil || used < 2 {
		t.Fatalf("used_memory %q: %v", info["Memory"]["used_memory"], err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, "probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a write with maxmemory at half the memory used: %v; want OOM", err)
	}
}

// D1: Redis is out of memory under noeviction and refuses every write. Hits
// and stale values are still served from Redis in one round trip; only
// misses load, once per key in the process; the breaker stays closed, and
// Stats and the log say that writes are refused.
func TestDegraded_D1_OutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	var logged testkit.Buffer
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
	outOfMemory(t, admin)
	loads.Store(0)

	for range 20 {
		if v, err := c.Fetch(ctx, "{hot}", time.Hour, load("reloaded")); err != nil || string(v) != "hot" {
			t.Fatalf("hot key under OOM = %q, %v; want the cached value", v, err)
		}
	}
	for range 5 {
		if v, err := c.Fetch(ctx, "{stale}", time.Hour, load("new")); err != nil || string(v) != "old" {
			t.Fatalf("stale key under OOM = %q, %v; want the stale value (stats %+v; log %s)", v, err, c.Stats(), logged.String())
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
	if err := c.Set(ctx, "{hot}", []byte("x"), time.Hour); !errors.Is(err, corral.ErrWriteRefused) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Set under OOM = %v; want ErrWriteRefused naming OOM", err)
	}
	// The refused Set is applied as a Delete, which Redis allows under OOM:
	// the value it was to replace is not served again.
	eventually(t, 2*time.Second, "the refused Set's key invalidated in Redis", func() bool {
		return admin.Exists(ctx, wire.EntryName("corral", "{hot}")).Val() == 0
	})
	eventually(t, 2*time.Second, "the replay counted", func() bool { return c.Stats().InvalidationsPending == 0 })
	if _, err := c.Get(ctx, "{hot}"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get of the refused Set's key: %v; want ErrMiss", err)
	}
	st := c.Stats()
	if st.InvalidationsQueued != 1 || st.InvalidationsReplayed != 1 {
		t.Fatalf("stats %+v; want the refused Set queued and applied as a Delete", st)
	}
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
	t.Parallel()
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
			// Over the client's 16 KB reply buffer by more than the 8 KB hard
			// limit, and incompressible: one inlined notice alone overflows
			// the subscriber's output buffer, however fast it reads.
			value := make([]byte, 30<<10)
			crand.Read(value)
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
			// b counts a wait before its SUBSCRIBE is confirmed: the
			// subscriber to watch is the one Redis shows on every key's
			// channel.
			for i := range keys {
				k := "{d3:" + strconv.Itoa(i) + "}"
				waitSubscribed(t, admin, "corral:n:"+k+":"+k, 1)
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
	t.Parallel()
	e := newEnv(t, nil)
	var logged testkit.Buffer
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
	t.Parallel()
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
	// The older release loads without storing over v2's entry, once: it
	// keeps its value while v2's entry stays the same.
	for range 3 {
		if v, err := corral.Fetch(ctx, v1, "k", time.Hour, load("one again")); err != nil || v != "one again" {
			t.Fatalf("v1 Fetch = %q, %v", v, err)
		}
	}
	if n := loads.Load(); n != 3 {
		t.Fatalf("%d loads; want 3 (one by the older release over the newer entry)", n)
	}
	if v, err := corral.Fetch(ctx, v2, "k", time.Hour, load("three")); err != nil || v != "two" {
		t.Fatalf("v2 after v1 read: %q, %v; want its own entry, untouched", v, err)
	}
	// v2 writes the entry anew: the older release loads once more.
	if err := v2.Set(ctx, "k", []byte(`"four"`), time.Hour); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, err := corral.Fetch(ctx, v1, "k", time.Hour, load("five")); err != nil || v != "five" {
			t.Fatalf("v1 Fetch after v2's Set = %q, %v", v, err)
		}
	}
	if n := loads.Load(); n != 4 {
		t.Fatalf("%d loads; want 4 (one more by the older release after the newer entry changed)", n)
	}
	// A release without a codec version (CodecVersion 0, the default) is the
	// oldest of all: the same for it.
	v0 := newCache(t, e.srv.Client(), nil)
	for range 3 {
		if v, err := corral.Fetch(ctx, v0, "k", time.Hour, load("zero")); err != nil || v != "zero" {
			t.Fatalf("v0 Fetch over v2's entry = %q, %v", v, err)
		}
	}
	if n := loads.Load(); n != 5 {
		t.Fatalf("%d loads; want 5 (one by the release without a codec version)", n)
	}
	if v, err := corral.Fetch(ctx, v2, "k", time.Hour, load("six")); err != nil || v != "four" {
		t.Fatalf("v2 after v0 read: %q, %v; want its own entry, untouched", v, err)
	}
}

// D5: under maxmemory with volatile-ttl, Redis evicts the lease (the key
// with the shortest TTL) while its load runs. Eviction is not revocation:
// the holder's commit stands when no Delete, Set or newer holder came in
// between, waiters elsewhere get its value, and nothing is counted lost.
// Delete and Set still revoke (with a marker, not by deleting the lease),
// and the marker makes nobody wait. The lease goes by hand (DEL, which is
// what eviction does) where the test needs to know when, and by real
// memory pressure once, where it can only bound the loads.
func TestDegraded_D5_Eviction(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl")
	admin := srv.Client()
	ctx := context.Background()
	// LeaseTTL 30s: no renewal (every 10s) and no waiter's timer comes
	// into play, unless a subtest wants it.
	opts := func() *corral.Options { return &corral.Options{LeaseTTL: 30 * time.Second} }

	t.Run("the commit finds the lease evicted", func(t *testing.T) {
		a, b := newCache(t, srv.Client(), opts()), newCache(t, srv.Client(), opts())
		var loads atomic.Int32
		got, finish := holding(t, a, "{d5a}", &loads, func() { admin.Del(ctx, leaseName("d5a")) })
		waiters := parkedWaiters(t, admin, b, "{d5a}", 5, &loads)
		finish()
		if r := <-got; r.err != nil || r.v != "v" {
			t.Fatalf("holder's Fetch = %q, %v", r.v, r.err)
		}
		for range 5 {
			if r := <-waiters; r.err != nil || r.v != "v" {
				t.Fatalf("waiter's Fetch = %q, %v; want the holder's value", r.v, r.err)
			}
		}
		assertEvictionSeen(t, a, b, "{d5a}", &loads)
	})

	t.Run("a renewal takes the evicted lease again", func(t *testing.T) {
		// LeaseTTL 3s: the renewal (every second) comes well before the
		// lease's deadline even on a starved machine, so it finds the lease
		// evicted, not expired (with 300 ms, a renewal 500 ms late found
		// it past its deadline: lost, rightly).
		a, b := newCache(t, srv.Client(), &corral.Options{LeaseTTL: 3 * time.Second}), newCache(t, srv.Client(), opts())
		var loads atomic.Int32
		got, finish := holding(t, a, "{d5b}", &loads, nil)
		admin.Del(ctx, leaseName("d5b"))
		eventually(t, 10*time.Second, "the holder's renewal takes its lease again", func() bool {
			return a.Stats().Evictions == 1 && admin.Exists(ctx, leaseName("d5b")).Val() == 1
		})
		finish()
		if r := <-got; r.err != nil || r.v != "v" {
			t.Fatalf("holder's Fetch = %q, %v", r.v, r.err)
		}
		assertEvictionSeen(t, a, b, "{d5b}", &loads)
	})

	for _, write := range []string{"Delete", "Set"} {
		t.Run(write+" during a load still revokes", func(t *testing.T) {
			a, b := newCache(t, srv.Client(), opts()), newCache(t, srv.Client(), opts())
			var loads atomic.Int32
			key := "{d5:" + write + "}"
			got, finish := holding(t, a, key, &loads, nil)
			var err error
			if write == "Delete" {
				err = b.Delete(ctx, key)
			} else {
				err = b.Set(ctx, key, []byte("set"), time.Minute)
			}
			if err != nil {
				t.Fatal(err)
			}
			finish()
			if r := <-got; r.err != nil || r.v != "v" {
				t.Fatalf("holder's Fetch = %q, %v; its callers are owed the value", r.v, r.err)
			}
			st := a.Stats()
			if st.CommitsRejected != 1 || st.LeasesLost != 1 || st.Evictions != 0 {
				t.Fatalf("holder's stats %+v; want the commit rejected, the lease lost, no eviction", st)
			}
			want := "set"
			if write == "Delete" {
				want = "loaded after the Delete"
			}
			// The marker left behind makes nobody wait: a miss loads at once.
			t0 := time.Now()
			if v, err := b.Fetch(ctx, key, time.Minute, value(want)); err != nil || string(v) != want || time.Since(t0) > prompt {
				t.Fatalf("Fetch after the %s = %q, %v after %v; want %q at once", write, v, err, time.Since(t0), want)
			}
			if b.Stats().Waits != 0 {
				t.Fatalf("a Fetch after the %s waited (stats %+v)", write, b.Stats())
			}
		})
	}

	t.Run("a Delete's marker makes nobody wait", func(t *testing.T) {
		a, b := newCache(t, srv.Client(), opts()), newCache(t, srv.Client(), opts())
		if err := a.Set(ctx, "{d5d}", []byte("old"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(ctx, "{d5d}"); err != nil {
			t.Fatal(err)
		}
		if got := admin.Get(ctx, leaseName("d5d")).Val(); got != "backoff" {
			t.Fatalf("lease after Delete = %q; want the marker", got)
		}
		t0 := time.Now()
		if v, err := b.Fetch(ctx, "{d5d}", time.Minute, value("new")); err != nil || string(v) != "new" || time.Since(t0) > prompt {
			t.Fatalf("Fetch after a Delete = %q, %v after %v; want a load at once", v, err, time.Since(t0))
		}
		if st := b.Stats(); st.Waits != 0 || st.Loads != 1 {
			t.Fatalf("stats %+v; want one load and no wait", st)
		}
	})

	t.Run("real memory pressure", func(t *testing.T) {
		srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-ttl")
		admin := srv.Client()
		a, b := newCache(t, srv.Client(), opts()), newCache(t, srv.Client(), opts())
		var loads atomic.Int32
		got, finish := holding(t, a, "{d5e}", &loads, nil)
		waiters := parkedWaiters(t, admin, b, "{d5e}", 5, &loads)
		fillUntilEvicted(t, admin, leaseName("d5e"))
		finish()
		if r := <-got; r.err != nil || r.v != "v" {
			t.Fatalf("holder's Fetch = %q, %v", r.v, r.err)
		}
		for range 5 {
			if r := <-waiters; r.err != nil || (r.v != "v" && r.v != "b") {
				t.Fatalf("waiter's Fetch = %q, %v", r.v, r.err)
			}
		}
		if n := loads.Load(); n > 2 {
			t.Fatalf("%d loads after one eviction; want at most 2", n)
		}
		if v, err := b.Get(ctx, "{d5e}"); err != nil || (string(v) != "v" && string(v) != "b") {
			t.Fatalf("Get after the loads = %q, %v; want a loaded value stored", v, err)
		}
		t.Logf("%d loads; holder's stats: %d evictions seen, %d commits rejected, Redis evicted %s keys",
			loads.Load(), a.Stats().Evictions, a.Stats().CommitsRejected, infoField(admin, "stats", "evicted_keys"))
	})
}

// fetched is one Fetch's result.
type fetched struct {
	v   string
	err error
}

// holding starts a Fetch of key on c whose load counts itself in loads and,
// once finish is called, runs before (if not nil) and returns "v". It
// returns when the load runs: c holds key's lease.
func holding(t *testing.T, c *corral.Cache, key string, loads *atomic.Int32, before func()) (<-chan fetched, func()) {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	got := make(chan fetched, 1)
	go func() {
		v, err := c.Fetch(context.Background(), key, time.Minute, func(context.Context) ([]byte, error) {
			loads.Add(1)
			close(started)
			<-release
			if before != nil {
				before()
			}
			return []byte("v"), nil
		})
		got <- fetched{string(v), err}
	}()
	select {
	case <-started:
	case r := <-got:
		t.Fatalf("Fetch of %s = %q, %v without loading; want it to hold the lease", key, r.v, r.err)
	}
	var once sync.Once
	finish := func() { once.Do(func() { close(release) }) }
	t.Cleanup(finish)
	return got, finish
}

// parkedWaiters starts n Fetches of key on c, whose own load (counted in
// loads) returns "b", and returns once their flight waits for the notice:
// it has fetched twice (WAIT, then again after subscribing) and its
// channel is subscribed. Until then the lease must stay, or the flight
// would take it.
func parkedWaiters(t *testing.T, admin *redis.Client, c *corral.Cache, key string, n int, loads *atomic.Int32) <-chan fetched {
	t.Helper()
	runs := scriptRuns(t, admin)
	notice := wire.NewNames("corral", key).Notice
	parked := make(chan struct{}, 1)
	corral.SetOnParked(c, func(channel string) {
		if channel == notice {
			select {
			case parked <- struct{}{}:
			default:
			}
		}
	})
	got := make(chan fetched, n)
	for range n {
		go func() {
			v, err := c.Fetch(context.Background(), key, time.Minute, func(context.Context) ([]byte, error) {
				loads.Add(1)
				return []byte("b"), nil
			})
			got <- fetched{string(v), err}
		}()
	}
	eventually(t, 10*time.Second, "the waiters' flight fetches twice", func() bool {
		st := c.Stats()
		return st.Waits == 1 && st.Joined == uint64(n-1) && scriptRuns(t, admin) >= runs+2
	})
	waitSubscribed(t, admin, notice, 1)
	// Under load the client may confirm the subscription after its second
	// fetch; it then fetches once more. Parked, it sends nothing more.
	select {
	case <-parked:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiters' flight never waits for a notice it can hear")
	}
	return got
}

// assertEvictionSeen checks a key whose lease holder, a, lost its lease to
// an eviction and committed all the same, while b waited: one load, one
// eviction seen, nothing lost or rejected, and the value stored.
func assertEvictionSeen(t *testing.T, a, b *corral.Cache, key string, loads *atomic.Int32) {
	t.Helper()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads; want 1 (the eviction cost a load)", n)
	}
	if st := a.Stats(); st.Evictions != 1 || st.LeasesLost != 0 || st.CommitsRejected != 0 {
		t.Fatalf("holder's stats %+v; want 1 eviction seen, no lease lost, no commit rejected", st)
	}
	if v, err := b.Get(context.Background(), key); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v; want the holder's value stored", v, err)
	}
}

// scriptRuns returns how many scripts the server has run (EVALSHA and EVAL
// calls), from INFO commandstats.
func scriptRuns(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				runs += n
			}
		}
	}
	return runs
}

// infoField returns one field of a section of INFO.
func infoField(rdb *redis.Client, section, field string) string {
	info := rdb.Info(context.Background(), section).Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return "?"
}

// fillUntilEvicted writes 1 KiB keys with a TTL of 45 s, longer than the
// lease's (30 s) and shorter than the entry's to come (a minute), until
// Redis, short of memory, evicts lease: volatile-ttl evicts the soonest to
// expire among the keys it samples. Then the fillers go before the entry.
func fillUntilEvicted(t *testing.T, rdb *redis.Client, lease string) {
	t.Helper()
	ctx := context.Background()
	filler := strings.Repeat("f", 1<<10)
	for i := 0; rdb.Exists(ctx, lease).Val() == 1; {
		if i > 200_000 {
			t.Fatalf("the lease was not evicted after %d filler keys", i)
		}
		pipe := rdb.Pipeline()
		for range 20 {
			pipe.Set(ctx, "filler:"+strconv.Itoa(i), filler, 45*time.Second)
			i++
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("filling Redis: %v", err)
		}
	}
}

// D5, the warning: soon after New (its warm-up) or at its first use, a Cache reads Redis's
// maxmemory-policy in the background and warns once when it may evict
// corral's keys; noeviction logs nothing. The policy is read by INFO (in
// the start-up script), so a user without CONFIG (managed Redis often
// denies or renames it) is still warned; a user allowed neither INFO nor
// CONFIG GET is told once that the policy could not be read, and every
// call still works. Close waits for the check, so the log is complete once
// the Cache is closed.
func TestDegraded_D5_EvictionPolicyWarning(t *testing.T) {
	t.Parallel()
	const warning, unread = "Redis may evict corral's keys", "could not read Redis's maxmemory-policy"
	for _, tc := range []struct {
		policy string
		denied string // how CONFIG GET is denied: "acl", "renamed", "acl and INFO" (INFO denied too), or "" (not)
		want   string // logged once; "" for nothing
	}{
		{"volatile-ttl", "", warning},
		{"allkeys-lru", "", warning},
		{"noeviction", "", ""},
		{"volatile-ttl", "acl", warning},
		{"volatile-ttl", "renamed", warning},
		{"noeviction", "acl", ""},
		{"volatile-ttl", "acl and INFO", unread},
	} {
		name := tc.policy
		if tc.denied != "" {
			name += ", CONFIG " + tc.denied
		}
		t.Run(name, func(t *testing.T) {
			args := []string{"--maxmemory", "64mb", "--maxmemory-policy", tc.policy}
			if tc.denied == "renamed" {
				args = append(args, "--rename-command", "CONFIG", "")
			}
			srv := redistest.Start(t, args...)
			rdb := srv.Client()
			if strings.HasPrefix(tc.denied, "acl") {
				ctx := context.Background()
				rules := []any{"ACL", "SETUSER", "app", "on", "nopass", "~*", "&*", "+@all", "-config"}
				if tc.denied == "acl and INFO" {
					rules = append(rules, "-info")
				}
				if err := rdb.Do(ctx, rules...).Err(); err != nil {
					t.Fatal(err)
				}
				rdb = srv.Client(func(o *redis.Options) { o.Username, o.Password = "app", "any" })
			}
			var logged testkit.Buffer
			c, err := corral.New(rdb, &corral.Options{Logger: slogTo(&logged)})
			if err != nil {
				t.Fatal(err)
			}
			manyCalls(t, c) // the check starts in New's warm-up, or at the first call
			c.Close()
			log := logged.String()
			for _, msg := range []string{warning, unread} {
				n, want := strings.Count(log, msg), 0
				if msg == tc.want {
					want = 1
				}
				if n != want {
					t.Fatalf("%q logged %d times; want %d:\n%s", msg, n, want, log)
				}
			}
			if tc.want == warning && !strings.Contains(log, "maxmemory-policy="+tc.policy) {
				t.Fatalf("the warning does not name the policy:\n%s", log)
			}
		})
	}

	// A Redis that does not answer at first use is no reason to say the
	// policy could not be read: the check is tried again later.
	t.Run("Redis down", func(t *testing.T) {
		srv := redistest.Start(t, "--maxmemory-policy", "volatile-ttl")
		rdb := srv.Client()
		srv.Close()
		var logged testkit.Buffer
		c := newCache(t, rdb, &corral.Options{Logger: slogTo(&logged)})
		if v, err := c.Fetch(context.Background(), "k", time.Minute, value("v")); err != nil || string(v) != "v" {
			t.Fatalf("Fetch with Redis down = %q, %v; want the loader's value (fail-open)", v, err)
		}
		c.Close()
		if log := logged.String(); strings.Contains(log, warning) || strings.Contains(log, unread) {
			t.Fatalf("logged about the policy with Redis down:\n%s", log)
		}
	})
}

// manyCalls makes concurrent calls of every kind on c, and fails t if any
// does not work.
func manyCalls(t *testing.T, c *corral.Cache) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "k" + strconv.Itoa(i%5)
			if v, err := c.Fetch(ctx, key, time.Minute, value("v")); err != nil || string(v) != "v" {
				t.Errorf("Fetch = %q, %v", v, err)
			}
			if _, err := c.Get(ctx, key); err != nil && !errors.Is(err, corral.ErrMiss) {
				t.Errorf("Get: %v", err)
			}
			if err := c.Set(ctx, "s"+strconv.Itoa(i), []byte("v"), time.Minute); err != nil {
				t.Errorf("Set: %v", err)
			}
			if err := c.Delete(ctx, "s"+strconv.Itoa(i)); err != nil {
				t.Errorf("Delete: %v", err)
			}
		}()
	}
	wg.Wait()
}

// On a Cluster every master's policy is read: one warning names the
// masters that may evict.
func TestDegraded_D5_EvictionPolicyCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	evicting := cl.Nodes[1]
	if err := evicting.Client().ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	var logged testkit.Buffer
	c, err := corral.New(cl.Client(), &corral.Options{Logger: slogTo(&logged)})
	if err != nil {
		t.Fatal(err)
	}
	manyCalls(t, c)
	c.Close()
	log := logged.String()
	if n := strings.Count(log, "Redis may evict corral's keys"); n != 1 || !strings.Contains(log, `maxmemory-policy="`+evicting.Addr+`=allkeys-lfu"`) {
		t.Fatalf("want one warning naming %s=allkeys-lfu alone:\n%s", evicting.Addr, log)
	}
}
