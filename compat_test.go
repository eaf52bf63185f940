package corral_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// previousScript returns a script of the release before compressed entries
// (testdata/release-ad94d96).
func previousScript(t *testing.T, name string) *redis.Script {
	t.Helper()
	src, err := os.ReadFile("testdata/release-ad94d96/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(src))
}

// A rolling deploy runs the previous release and this one side by side on
// one Redis. Each reads what the other writes, or sees no entry: never bytes
// in a format it does not know.
func TestCompat_PreviousRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	oldFetch, oldCommit := previousScript(t, "fetch"), previousScript(t, "commit")
	names := func(key string) wire.Names { return wire.NewNames("corral", key) }
	oldWrite := func(key, value string) {
		t.Helper()
		n := names(key)
		if err := oldCommit.Run(ctx, e.rdb, []string{n.Entry, n.Lease, n.Notice}, "", value, "", 60000, 60000, "1", "PUBLISH", 16384).Err(); err != nil {
			t.Fatal(err)
		}
	}
	oldRead := func(key string) []any {
		t.Helper()
		n := names(key)
		res, err := oldFetch.Run(ctx, e.rdb, []string{n.Entry, n.Lease}, "old-token", 5000, "0").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// An entry the previous release wrote is a hit here.
	oldWrite("a", "from the old release")
	if v, err := e.c.Fetch(ctx, "a", time.Minute, value("reloaded")); err != nil || string(v) != "from the old release" {
		t.Fatalf("new Fetch of an old entry = %q, %v", v, err)
	}

	// A plain entry this release writes (with its commit token) is a hit there.
	if err := e.c.Set(ctx, "b", []byte("from the new release"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if res := oldRead("b"); res[0] != "HIT" || res[1] != "from the new release" {
		t.Fatalf("old fetch of a new plain entry = %v", res)
	}

	// A compressed entry is no entry there: the old release takes the lease
	// and loads, and its commit replaces the entry with one both read.
	cz := newCache(t, e.srv.Client(), &corral.Options{Compress: true, CompressMinBytes: 1024})
	text := []byte(strings.Repeat("a value that compresses well. ", 1000))
	if err := cz.Set(ctx, "c", text, time.Minute); err != nil {
		t.Fatal(err)
	}
	h := e.rdb.HGetAll(ctx, names("c").Entry).Val()
	if _, plain := h["v"]; plain || !strings.Contains(h["f"], "z") || len(h["z"]) >= len(text)/4 {
		t.Fatalf("compressed entry: fields %d v, %d z, f %q; want only z, much smaller", len(h["v"]), len(h["z"]), h["f"])
	}
	if res := oldRead("c"); res[0] != "LOAD" {
		t.Fatalf("old fetch of a compressed entry = %v; want LOAD (a miss), never the compressed bytes", res)
	}
	n := names("c")
	if err := oldCommit.Run(ctx, e.rdb, []string{n.Entry, n.Lease, n.Notice}, "old-token", "reloaded by the old release", "", 60000, 60000, "1", "PUBLISH", 16384).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := cz.Fetch(ctx, "c", time.Minute, value("not me")); err != nil || string(v) != "reloaded by the old release" {
		t.Fatalf("new Fetch after the old release reloaded = %q, %v", v, err)
	}
}

// Compress stores values of at least CompressMinBytes compressed when that
// makes them smaller; every process, waiters included, reads them back.
func TestCompression(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	opts := func() *corral.Options { return &corral.Options{Compress: true, CompressMinBytes: 1024} }
	holder := newCache(t, e.srv.Client(), opts())
	waiter := newCache(t, e.srv.Client(), opts())
	ctx := context.Background()
	text := bytes.Repeat([]byte("stampede "), 20000)
	finish := hold(t, holder, "{z}", text, nil)
	got := make(chan []byte, 1)
	go func() {
		v, _ := waiter.Fetch(ctx, "{z}", time.Minute, value("not me"))
		got <- v
	}()
	waitSubscribed(t, e.rdb, "corral:n:{z}:{z}", 1)
	finish()
	if v := <-got; !bytes.Equal(v, text) {
		t.Fatalf("waiter got %d bytes; want the %d-byte value", len(v), len(text))
	}
	if v, err := waiter.Get(ctx, "{z}"); err != nil || !bytes.Equal(v, text) {
		t.Fatalf("Get = %d bytes, %v", len(v), err)
	}
	if f := e.rdb.HGet(ctx, "corral:e:{z}:{z}", "f").Val(); f != "z" {
		t.Fatalf("flags %q; want z", f)
	}
	// Random bytes do not compress, and small values are not tried: both
	// stay plain.
	random := make([]byte, 64<<10)
	rand.Read(random)
	for key, v := range map[string][]byte{"{r}": random, "{s}": []byte("small")} {
		if err := holder.Set(ctx, key, v, time.Minute); err != nil {
			t.Fatal(err)
		}
		if h := e.rdb.HGetAll(ctx, "corral:e:"+key+":"+key).Val(); h["v"] != string(v) || h["f"] != "" {
			t.Fatalf("%s stored as %d bytes of v, flags %q; want it plain", key, len(h["v"]), h["f"])
		}
		if got, err := waiter.Fetch(ctx, key, time.Minute, value("not me")); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("Fetch(%s) = %d bytes, %v", key, len(got), err)
		}
	}
}

// An entry with a flag this release does not know was written by a later
// release in a format this one cannot read: it is no entry here (Fetch
// loads and replaces it, Get misses), never served as a plain value.
func TestCompat_UnknownFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := newCache(t, e.srv.Client(), nil)
	ctx := context.Background()
	if err := c.Set(ctx, "k", []byte("plain"), time.Minute); err != nil {
		t.Fatal(err)
	}
	e.rdb.HSet(ctx, wire.EntryName("corral", "k"), "f", "q", "v", "a format from the future")
	if v, err := c.Get(ctx, "k"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get = %q, %v; want ErrMiss", v, err)
	}
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("reloaded"), nil }
	for range 2 {
		if v, err := c.Fetch(ctx, "k", time.Minute, load); err != nil || string(v) != "reloaded" {
			t.Fatalf("Fetch = %q, %v; want the reloaded value", v, err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads; want 1 (then a hit on the entry it replaced)", n)
	}
}

// A compressed payload that does not decompress (a corrupt or truncated
// entry) is a missing entry, reloaded once under the lease: not Redis
// failing, so no fail-open and no breaker failure.
func TestCompression_CorruptEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	var logged testkit.Buffer
	c := newCache(t, e.srv.Client(), &corral.Options{Compress: true, CompressMinBytes: 1024, Logger: slogTo(&logged)})
	ctx := context.Background()
	text := bytes.Repeat([]byte("stampede "), 2000)
	if err := c.Set(ctx, "k", text, time.Minute); err != nil {
		t.Fatal(err)
	}
	e.rdb.HSet(ctx, wire.EntryName("corral", "k"), "z", "not s2 at all")
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) { loads.Add(1); return text, nil }
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Fetch(ctx, "k", time.Minute, load); err != nil || !bytes.Equal(v, text) {
				t.Errorf("Fetch = %d bytes, %v; want the reloaded value", len(v), err)
			}
		}()
	}
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads; want 1", n)
	}
	if v, err := c.Get(ctx, "k"); err != nil || !bytes.Equal(v, text) {
		t.Fatalf("after the reload Get = %d bytes, %v", len(v), err)
	}
	st := c.Stats()
	if st.DecodeFailures == 0 || st.FailOpens != 0 || st.RedisErrors != 0 {
		t.Fatalf("stats %+v; want a decode failure, no fail-open, no Redis error", st)
	}
	if !strings.Contains(logged.String(), "does not decode") {
		t.Fatalf("no warning logged:\n%s", logged.String())
	}
}

// A rolling deploy meets revocation markers: this release's Delete revokes
// a load of the previous release (its commit is rejected), and the previous
// release takes the lease over the marker on a miss, as over a backoff,
// rather than wait for it. The previous release's Delete still deletes the
// lease, which this release takes for an eviction: a load of a key without
// an entry that started before such a Delete commits after it. That is the
// cost of the deploy, gone once every instance runs this release.
func TestCompat_RevocationMarkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	oldFetch, oldCommit, oldDelete := previousScript(t, "fetch"), previousScript(t, "commit"), previousScript(t, "delete")
	n := wire.NewNames("corral", "{a}")
	oldLoad := func(token string) string {
		t.Helper()
		res, err := oldFetch.Run(ctx, e.rdb, []string{n.Entry, n.Lease}, token, 5000, "0").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[0].(string)
	}
	if got := oldLoad("old-token"); got != "LOAD" {
		t.Fatalf("old fetch of a missing key = %s; want LOAD", got)
	}
	if err := e.c.Delete(ctx, "{a}"); err != nil {
		t.Fatal(err)
	}
	stored, err := oldCommit.Run(ctx, e.rdb, []string{n.Entry, n.Lease, n.Notice}, "old-token", "before the Delete", "", 60000, 60000, "1", "PUBLISH", 16384).Int()
	if err != nil || stored != 0 {
		t.Fatalf("old commit after a new Delete = %d, %v; want 0 (rejected)", stored, err)
	}
	if got := oldLoad("another-old-token"); got != "LOAD" {
		t.Fatalf("old fetch over a revocation marker = %s; want LOAD, not WAIT", got)
	}

	var loads atomic.Int32
	got, finish := holding(t, e.c, "{b}", &loads, func() {
		b := wire.NewNames("corral", "{b}")
		if err := oldDelete.Run(ctx, e.rdb, []string{b.Entry, b.Lease, b.Notice}, "PUBLISH").Err(); err != nil {
			t.Error(err)
		}
	})
	finish()
	if r := <-got; r.err != nil || r.v != "v" {
		t.Fatalf("Fetch = %q, %v", r.v, r.err)
	}
	if v, err := e.c.Get(ctx, "{b}"); err != nil || string(v) != "v" || e.c.Stats().Evictions != 1 {
		t.Fatalf("after an old Delete during the load: Get = %q, %v, stats %+v; want the value stored (taken for an eviction)", v, err, e.c.Stats())
	}
}

// A FetchMany's member leases (token@group) are plain leases another
// instance holds to the previous release: its fetch waits on them, and hits
// once the batch has committed.
func TestCompat_GroupLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	oldFetch := previousScript(t, "fetch")
	n := wire.NewNames("corral", "m")
	oldKind := func() string {
		t.Helper()
		res, err := oldFetch.Run(ctx, e.rdb, []string{n.Entry, n.Lease}, "old-token", 5000, "0").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[0].(string)
	}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := e.c.FetchMany(ctx, []string{"m", "n"}, time.Minute, func(ctx context.Context, missing []string) (map[string][]byte, error) {
			close(started)
			<-release
			return map[string][]byte{"m": []byte("batch"), "n": []byte("batch")}, nil
		})
		done <- err
	}()
	<-started
	if lease := e.rdb.Get(ctx, n.Lease).Val(); !strings.Contains(lease, "@corral:b:{all}:") {
		t.Fatalf("lease of a FetchMany's key = %q; want a member of its group", lease)
	}
	if got := oldKind(); got != "WAIT" {
		t.Fatalf("old fetch while a FetchMany holds the key = %s; want WAIT", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := oldKind(); got != "HIT" {
		t.Fatalf("old fetch after the batch committed = %s; want HIT", got)
	}
}
