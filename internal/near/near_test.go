package near

import (
	"context"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// healthy returns a near cache without a stream, made to serve copies as
// if its stream were up.
func healthy(t *testing.T, o Config) *Cache {
	t.Helper()
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(time.Now()) })
	n.healthy.Store(true)
	return n
}

// copyOf is a copy of val whose soft expiry is in soft.
func copyOf(val string, soft time.Duration) *Entry {
	return &Entry{Val: []byte(val), Soft: Clock() + int64(soft), Size: uint32(len(val))}
}

// A copy is a hit only while the stream is up and unchanged since it was
// read, and within TTL; one read before an invalidation is never stored.
func TestCopiesAndInvalidations(t *testing.T) {
	t.Parallel()
	n := healthy(t, Config{Size: 10, TTL: time.Minute})
	k := Key{Key: "k"}
	n.Put(k, copyOf("v", time.Minute), n.Snapshot())
	if e, _ := n.Lookup(k); e == nil || string(e.Val.([]byte)) != "v" {
		t.Fatalf("Lookup = %v; want the copy", e)
	}

	snap := n.Snapshot() // a read of Redis begins
	n.Invalidate("k")    // and a write's invalidation arrives during it
	n.Put(k, copyOf("old", time.Minute), snap)
	if e, _ := n.Lookup(k); e != nil {
		t.Fatalf("Lookup = %v; a copy read before an invalidation was stored", e.Val)
	}

	n.Put(k, copyOf("v", time.Minute), n.Snapshot())
	n.streamChanged() // the stream went down and up: it may have missed one
	if e, _ := n.Lookup(k); e != nil {
		t.Fatal("a copy read before the stream changed is still a hit")
	}
	if _, _, ok := n.FailSafe("k"); ok {
		t.Fatal("a copy is kept for fail-safe use with SafeTTL 0")
	}
}

// Copies decoded into other types are dropped with the key's bytes, once
// their type is in use.
func TestInvalidateReachesEveryType(t *testing.T) {
	t.Parallel()
	n := healthy(t, Config{Size: 10, TTL: time.Minute})
	typ := reflect.TypeFor[int]()
	n.Use(typ)
	n.Use(typ) // once is enough
	n.Put(Key{"k", typ}, &Entry{Val: 1, Soft: Clock() + int64(time.Minute)}, n.Snapshot())
	n.Put(Key{Key: "k"}, copyOf("1", time.Minute), n.Snapshot())
	n.Invalidate("k")
	if e, _ := n.Lookup(Key{"k", typ}); e != nil {
		t.Fatal("the typed copy outlived the key's invalidation")
	}
	if e, _ := n.Lookup(Key{Key: "k"}); e != nil {
		t.Fatal("the bytes outlived the key's invalidation")
	}
}

// While Redis cannot be used, copies serve for SafeTTL, within their soft
// expiry, whatever the stream; a fail-open load's copy is never a hit.
func TestFailSafeCopies(t *testing.T) {
	t.Parallel()
	n := healthy(t, Config{Size: 10, TTL: time.Minute, SafeTTL: time.Hour})
	n.Put(Key{Key: "read"}, copyOf("r", time.Minute), n.Snapshot())
	n.PutFailOpen(Key{Key: "open"}, copyOf("o", time.Minute), n.Snapshot())
	n.healthy.Store(false) // the stream broke
	if e, _, ok := n.FailSafe("read"); !ok || string(e.Val.([]byte)) != "r" {
		t.Fatal("a copy read from Redis does not serve while Redis cannot be used")
	}
	if _, ok := n.FailOpenCopy("read"); ok {
		t.Fatal("FailOpenCopy answered with a copy read from Redis")
	}
	if e, ok := n.FailOpenCopy("open"); !ok || string(e.Val.([]byte)) != "o" {
		t.Fatal("the fail-open load's copy is not served")
	}
	n.healthy.Store(true)
	if e, _ := n.Lookup(Key{Key: "open"}); e != nil {
		t.Fatal("a fail-open load's copy is a hit")
	}
	n.Put(Key{Key: "stale"}, copyOf("s", 0), n.Snapshot())
	if _, _, ok := n.FailSafe("stale"); ok {
		t.Fatal("a copy past its soft expiry serves")
	}
}

// XFetch's pick: the closer the soft expiry, in units of the load's
// duration times the draw, the earlier.
func TestEarly(t *testing.T) {
	t.Parallel()
	e := &Entry{Soft: int64(100 * time.Millisecond), Took: 10} // ms
	for _, tc := range []struct {
		x    float64
		now  time.Duration
		want bool
	}{{0, 99 * time.Millisecond, false}, {1, 50 * time.Millisecond, false}, {1, 90 * time.Millisecond, true}, {5, 50 * time.Millisecond, true}} {
		if got := Early(e, tc.x, int64(tc.now)); got != tc.want {
			t.Errorf("Early(x %v, now %v) = %v; want %v", tc.x, tc.now, got, tc.want)
		}
	}
}

// Held values serve until their end; one forgotten during its load is
// not held.
func TestHeld(t *testing.T) {
	t.Parallel()
	h := NewHeld(10, 1<<20)
	t.Cleanup(h.Close)
	seq := h.Seq()
	h.Put("k", &Value{Val: []byte("v"), Until: Clock() + int64(time.Minute), Took: 3}, seq)
	if v, ok := h.Get("k"); !ok || string(v.Val) != "v" {
		t.Fatal("the held value does not serve")
	}
	if took, ok := h.Took("k"); !ok || took != 3 {
		t.Fatalf("Took = %v, %v; want 3", took, ok)
	}
	seq = h.Seq()
	h.Forget("k") // a Delete returned while a load ran
	h.Put("k", &Value{Val: []byte("old"), Until: Clock() + int64(time.Minute)}, seq)
	if _, ok := h.Get("k"); ok {
		t.Fatal("a value loaded before its key was forgotten is held")
	}
}

// A value loaded over a newer entry serves while that entry is the same.
func TestNewer(t *testing.T) {
	t.Parallel()
	n := NewNewer()
	t.Cleanup(n.Close)
	n.Set("k", 100, []byte("v"))
	if v, ok := n.Get("k", 100); !ok || string(v) != "v" {
		t.Fatal("the value does not serve over its entry")
	}
	if _, ok := n.Get("k", 200); ok {
		t.Fatal("the value serves over a refreshed entry")
	}
}

// The stream keeps copies coherent with Redis: a change of an entry by
// anyone (a write, a DEL by hand, a flush) drops its copies; a change
// under another prefix does not.
func TestTrackingInvalidates(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	n, err := New(Config{Size: 10, TTL: time.Minute, Client: srv.Client(), Prefix: "p:e:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close(time.Now().Add(time.Second))
		n.Close(time.Now().Add(time.Second)) // twice: the second does nothing
	})
	testkit.Eventually(t, 10*time.Second, "the stream up", n.healthy.Load)
	held := func(key string) bool {
		e, _ := n.Lookup(Key{Key: key})
		return e != nil
	}
	put := func(key string) {
		t.Helper()
		// Any invalidation that arrives during a Put (one of an earlier
		// write) keeps it from storing: try until one stores.
		testkit.Eventually(t, 5*time.Second, "a copy of "+key, func() bool {
			n.Put(Key{Key: key}, copyOf("v", time.Minute), n.Snapshot())
			return held(key)
		})
	}
	write := func(name string) {
		t.Helper()
		if err := admin.HSet(ctx, name, "v", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"set", "{tag}:k", "a}:b"} {
		put(key)
		write(wire.EntryName("p", key))
		testkit.Eventually(t, 5*time.Second, "the copy of "+key+" dropped", func() bool { return !held(key) })
	}
	write(wire.EntryName("p", "del"))
	put("marker")
	write(wire.EntryName("p", "marker")) // invalidations arrive in order: the write's came first
	testkit.Eventually(t, 5*time.Second, "the copy of marker dropped", func() bool { return !held("marker") })
	put("del")
	if err := admin.Del(ctx, wire.EntryName("p", "del")).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the copy dropped by DEL", func() bool { return !held("del") })

	put("other")
	put("last")
	write(wire.EntryName("q", "other")) // another prefix: not tracked
	write(wire.EntryName("p", "last"))  // invalidations arrive in order: this one after
	testkit.Eventually(t, 5*time.Second, "the copy of last dropped", func() bool { return !held("last") })
	if !held("other") {
		t.Fatal("a write under another prefix dropped a copy")
	}
	if err := admin.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the copies dropped by the flush", func() bool { return !held("other") })
}

// A stream that cannot be set up (no right to CLIENT TRACKING) is told,
// once while it stays down, and copies are never hits.
func TestTrackingRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.AddUser(t, "notrack", "pw", "~*", "&*", "+@all", "-client|tracking")
	var mu sync.Mutex
	var told []error
	n, err := New(Config{Size: 10, TTL: time.Minute, Prefix: "p:e:",
		Client: srv.Client(func(o *redis.Options) { o.Username, o.Password = "notrack", "pw" }),
		StreamFailed: func(node string, err error) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, err)
		}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the failure told", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(told) > 0
	})
	n.Put(Key{Key: "k"}, copyOf("v", time.Minute), n.Snapshot())
	if e, _ := n.Lookup(Key{Key: "k"}); e != nil {
		t.Fatal("a copy is a hit without a stream")
	}
	n.Close(time.Now().Add(time.Second))
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || !strings.Contains(told[0].Error(), "NOPERM") {
		t.Fatalf("told %v; want one NOPERM", told)
	}
}

// otter keeps a copy coarseResolution past its life, on a coarse clock
// (coarse.go): whether the copy is a hit is decided on Clock all the same,
// so a copy past its end is no hit, whatever otter still holds.
func TestCopyNoHitPastItsEnd(t *testing.T) {
	t.Parallel()
	n := healthy(t, Config{Size: 10, TTL: time.Minute})
	k := Key{Key: "k"}
	e := copyOf("v", time.Second)
	n.Put(k, e, n.Snapshot())
	if got, _ := n.Lookup(k); got == nil && Clock() < e.fresh {
		t.Fatal("a fresh copy is no hit")
	}
	if !testkit.Within(10*time.Second, 5*time.Millisecond, func() bool { return Clock() >= e.fresh }) {
		t.Fatal("the copy's end never came")
	}
	if got, _ := n.Lookup(k); got != nil {
		t.Fatal("a copy past its end is a hit")
	}
	if _, _, ok := n.FailSafe("k"); ok {
		t.Fatal("a copy is kept for fail-safe use with SafeTTL 0")
	}
}

// otter's expiry of a copy is its life plus coarseResolution, so that a
// clock lagging by up to that much drops no copy still a hit.
func TestOtterKeepsCopiesPastTheirLife(t *testing.T) {
	t.Parallel()
	n := healthy(t, Config{Size: 10, TTL: time.Minute})
	k := Key{Key: "k"}
	coarse.mu.Lock()
	clock := coarse.clock
	coarse.mu.Unlock()
	before := clock.NowNano()
	n.Put(k, copyOf("v", time.Hour), n.Snapshot()) // its life: TTL, a minute
	after := clock.NowNano()
	got, ok := n.c.GetEntryQuietly(k)
	if !ok {
		t.Fatal("the copy is not held")
	}
	keep := int64(time.Minute + coarseResolution)
	if got.ExpiresAtNano < before+keep || got.ExpiresAtNano > after+keep {
		t.Fatalf("otter expires the copy at %d; want its life and the margin after it was stored, in [%d, %d]",
			got.ExpiresAtNano, before+keep, after+keep)
	}
}

// The coarse clock runs while a near cache is open, and its goroutine
// stops with the last one.
func TestCoarseClockStopsWithLastCache(t *testing.T) {
	before := goleak.IgnoreCurrent()
	a, err := New(Config{Size: 1, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Size: 1, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	coarse.mu.Lock()
	users, clock := coarse.users, coarse.clock
	coarse.mu.Unlock()
	if users < 2 || clock == nil {
		t.Fatalf("users %d, clock %v: the two caches do not share a running clock", users, clock)
	}
	a.Close(time.Now())
	a.Close(time.Now()) // twice: released once
	b.Close(time.Now())
	if err := goleak.Find(before); err != nil {
		t.Fatal(err)
	}
}

// Until counts the server's time left, less the millisecond the server's
// clock was rounded down by, from when the request was sent, and saturates
// for expiries too far either way to count in nanoseconds.
func TestUntil(t *testing.T) {
	const now = 1_733_380_000_000 // server ms
	sent := int64(5 * time.Second)
	if got := Until(sent, now+1500, now); got != sent+int64(1499*time.Millisecond) {
		t.Errorf("Until 1.5 s ahead = %d", got)
	}
	if got := Until(sent, now-20, now); got != sent-int64(21*time.Millisecond) {
		t.Errorf("Until 20 ms behind = %d", got)
	}
	for _, soft := range []int64{math.MaxInt64, now + 200*365*24*3600*1000} {
		if got := Until(sent, soft, now); got != math.MaxInt64/2 {
			t.Errorf("Until(%d) = %d; want never (MaxInt64/2)", soft, got)
		}
	}
	for _, soft := range []int64{math.MinInt64, -now} {
		if got := Until(sent, soft, now); got != -math.MaxInt64/2 {
			t.Errorf("Until(%d) = %d; want long past (-MaxInt64/2)", soft, got)
		}
	}
}
