// Package observetest runs one scripted set of Fetch calls against private
// redis-servers with a given corral.Observer, for the tests of corral's
// observation and of its adapters (corralprom, corralotel): every outcome of
// a call, loads and failed loads, a coalesced call, a cold stampede on two
// Caches (each with its own client) that costs the fleet one load and one
// miss, calls that end in errors of their own (a context that ends, an
// invalid key), a FetchMany, a lost lease and a rejected commit, near hits,
// fail-open while redis-server is killed, a circuit breaker that opens and
// closes again, and an outage (a proxy in front of redis-server refuses
// connections): a fail-safe answer from memory, an invalidation queued and
// replayed once Redis is back, one dropped from a full queue, and the time
// the breaker was open. Run checks that the outcomes the Caches' Stats
// count add up to the calls the script made, prefix by prefix, and the
// Stats against the script's exact counts where they are deterministic,
// and returns them, one Stats per prefix, for the caller to compare with
// what its Observer recorded (Events says what each Stats implies);
// RunDuring also lets the caller look during the outage. HitBench is the
// adapters' hit benchmarks: what an Observer costs a hit.
package observetest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The prefixes of the script's Caches. Two Caches share Prefix, as two
// processes of one service would: one waits for the other's load.
const (
	Prefix         = "obs"
	PrefixNear     = "obs-near"
	PrefixFailOpen = "obs-failopen"
	PrefixOutage   = "obs-outage"
)

// Stampede is how many calls each of the two Caches of Prefix makes of
// the cold key of the stampede.
const Stampede = 5

// Want is what the script's two Caches of Prefix count, summed: the
// deterministic part of the run. One miss per load in the foreground (9;
// the tenth load is a refresh); the stampede's other calls Coalesced (but
// for the call of another flight) or Waited; Errors: a call whose context
// ended while it waited for a load, one whose context had ended, an empty
// key, and FetchMany's (ManyOutcomes).
var Want = corral.Stats{
	Hits: 2, Misses: 9, NegativeHits: 1, FailureHits: 1, StaleHits: 2, StaleIfError: 1,
	Coalesced: 1 + Stampede - 1, Waited: Stampede, Errors: 6, Joined: 2 + 2*(Stampede-1),
	Loads: 10, LoadErrors: 2, Waits: 1, Refreshes: 1, RefreshErrors: 1, LeasesLost: 1, CommitsRejected: 1,
	TagInvalidations: 2, Clears: 1, Expires: 1,
}

// ManyOutcomes are the outcomes of the keys of the script's FetchMany
// calls, on a Cache of Prefix: a hit, two misses (one call of loadMany), an
// empty key, and a call refused as a whole (ErrInvalidTTL) of two keys.
// They are calls that no span of their own times (corralotel).
var ManyOutcomes = map[corral.EventKind]uint64{corral.EventHit: 1, corral.EventMiss: 2, corral.EventError: 3}

// WantOutage is what the Cache of PrefixOutage counts, but for
// BreakerOpens (at least 1) and OutageTime (more than 0): a fail-open load
// and its value served from memory while Redis refuses connections, a
// queued and a dropped invalidation (MaxPendingInvalidations is 1), the
// queued one replayed once Redis is back, and then a call whose lease
// commits the fail-open load's value (no second load): coalesced with it.
var WantOutage = corral.Stats{
	FailOpens: 1, FailSafeHits: 1, Coalesced: 1, Loads: 1,
	InvalidationsQueued: 1, InvalidationsReplayed: 1, InvalidationsDropped: 1,
}

// errBoom is the script's failing loader's error.
var errBoom = errors.New("boom")

// within bounds every wait of the script.
const within = 30 * time.Second

// Run runs the script with obs on every Cache, closes the Caches, and
// returns their Stats by prefix (summed over the Caches of a prefix).
func Run(t *testing.T, obs corral.Observer) map[string]corral.Stats {
	t.Helper()
	return RunDuring(t, obs, nil)
}

// RunDuring is Run, calling during (unless nil) in the middle of the
// outage, with the Stats of the Cache of PrefixOutage: Redis refuses
// connections, the breaker is open, one call was answered from memory, one
// invalidation waits in the queue (InvalidationsPending is 1) and another
// was dropped. OutageTime grows while during runs: read the Stats before
// and after what is to be compared with them.
func RunDuring(t *testing.T, obs corral.Observer, during func(stats func() corral.Stats)) map[string]corral.Stats {
	t.Helper()
	srv := redistest.Start(t)
	opts := func(prefix string) *corral.Options {
		return &corral.Options{
			Prefix: prefix, Observer: obs, StaleTTL: time.Minute, ErrorTTL: time.Minute,
			DisableJitter: true, DisableEarlyRefresh: true, LeaseTTL: 30 * time.Second,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
	}
	made := calls{} // by prefix
	a := newCache(t, srv.Client(), opts(Prefix), made)
	b := newCache(t, srv.Client(), opts(Prefix), made)
	script(t, a, srv.Client())
	stampede(t, a, b, Stampede)
	ownErrors(t, a)
	fetchMany(t, a)
	// Group invalidations, last (a Clear reaches every key): two tags, a
	// Clear, an Expire.
	if err := errors.Join(a.InvalidateTags(context.Background(), "t1", "t2"), a.Clear(context.Background()),
		a.Expire(context.Background(), "co")); err != nil {
		t.Fatal(err)
	}

	nearOpts := opts(PrefixNear)
	nearOpts.NearCache = corral.NearCacheOptions{Size: 100, TTL: time.Hour}
	n := newCache(t, srv.Client(), nearOpts, made)
	nearHits(t, n)

	down := redistest.Start(t)
	failOpts := opts(PrefixFailOpen)
	failOpts.BreakerCooldown = 50 * time.Millisecond
	f := newCache(t, down.Client(func(o *redis.Options) { o.DialTimeout = 200 * time.Millisecond }), failOpts, made)
	failOpen(t, f, down)

	proxy := redistest.StartProxy(t, srv.Addr)
	outOpts := opts(PrefixOutage)
	outOpts.MaxPendingInvalidations = 1
	outOpts.FailSafe.Throttle = time.Hour // the fail-open value is served however slow the machine
	outOpts.RedisTimeout = time.Minute    // and taken by the lease after the outage (leasedLoad keeps it RedisTimeout)
	out := newCache(t, srv.Client(func(o *redis.Options) { o.Addr = proxy.Addr }), outOpts, made)
	outage(t, out, proxy, srv.Client(), during)

	// Close waits for flights and background refreshes: every event has
	// been told once it returns.
	got := map[string]corral.Stats{}
	for _, c := range []cache{a, b, n, f, out} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		got[c.prefix] = add(got[c.prefix], c.Stats())
	}
	// Every call has one outcome: they add up to the calls made.
	for prefix, st := range got {
		if st.Calls() != made[prefix].Load() {
			t.Fatalf("%s: the outcomes add up to %d calls; the script made %d (Stats %+v)", prefix, st.Calls(), made[prefix].Load(), st)
		}
	}
	if st := Counted(got[Prefix]); st != Want {
		t.Fatalf("the script's Stats of %q:\n%+v\nwant\n%+v", Prefix, st, Want)
	}
	if st := got[PrefixNear]; st.NearHits == 0 || st.Misses != 1 || st.Loads != 1 || st.Errors != 0 {
		t.Fatalf("the near cache's Stats: %+v; want near hits after 1 miss and 1 load", st)
	}
	// Each miss after the outage loads, or commits a fail-open load's value
	// ended less than RedisTimeout before (leasedLoad: coalesced): FailOpens
	// to FailOpens + Misses loads.
	if st := got[PrefixFailOpen]; st.FailOpens == 0 || st.Loads < st.FailOpens || st.Loads > st.FailOpens+st.Misses || st.Errors != 0 || st.BreakerOpens == 0 || st.BreakerOpen || st.OutageTime <= 0 {
		t.Fatalf("the fail-open Stats: %+v; want fail-opens, a breaker that opened and closed, time open", st)
	}
	st := got[PrefixOutage]
	if st.BreakerOpens == 0 || st.BreakerOpen || st.OutageTime <= 0 || st.InvalidationsPending != 0 {
		t.Fatalf("the outage's Stats: %+v; want a breaker that opened and closed, time open, nothing pending", st)
	}
	counted := Counted(st)
	counted.BreakerOpens = 0
	if counted != WantOutage {
		t.Fatalf("the outage's Stats:\n%+v\nwant\n%+v", counted, WantOutage)
	}
	return got
}

// script runs one Cache's part of the script: each outcome of a call from
// an entry and of a load, a coalesced call, a lost lease.
func script(t *testing.T, c cache, rdb *redis.Client) {
	ctx := context.Background()
	fetch := func(key string, load func(context.Context) ([]byte, error), want string, wantErr error) {
		t.Helper()
		v, err := c.Fetch(ctx, key, time.Hour, load)
		if string(v) != want || !errors.Is(err, wantErr) {
			t.Fatalf("Fetch(%q) = %q, %v; want %q, %v", key, v, err, want, wantErr)
		}
	}
	fetch("k", value("v"), "v", nil) // miss, load
	fetch("k", value("x"), "v", nil) // hit
	notFound := func(context.Context) ([]byte, error) { return nil, corral.ErrNotFound }
	fetch("nf", notFound, "", corral.ErrNotFound) // miss, load
	fetch("nf", notFound, "", corral.ErrNotFound) // negative hit
	fail := func(context.Context) ([]byte, error) { return nil, errBoom }
	fetch("bad", fail, "", errBoom)                 // miss, failed load, cached (ErrorTTL)
	fetch("bad", fail, "", corral.ErrCachedFailure) // failure hit

	// Stale: an entry past its soft expiry, served while its refresh
	// fails in the background; then served as stale-if-error.
	if err := c.Set(ctx, "st", []byte("old"), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	pastSoftExpiry(t, rdb, wire.EntryName(Prefix, "st"))
	fetch("st", fail, "old", nil) // stale hit, refresh (failed load)
	poll(t, "the failed refresh", func() bool { return c.Stats().RefreshErrors == 1 })
	fetch("st", fail, "old", nil) // stale-if-error (ErrorTTL holds refreshes off)

	// Coalesced: a second call joins the first's flight.
	release, done := hold(t, c, "co", "v")
	second := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, "co", time.Hour, value("x"))
		second <- err
	}()
	poll(t, "the coalesced call", func() bool { return c.Stats().Joined == 1 })
	release()
	if err := errors.Join(<-done, <-second); err != nil {
		t.Fatal(err)
	}

	// A lease revoked by Delete during the load: the commit is rejected.
	release, done = hold(t, c, "lost", "v")
	if err := c.Delete(ctx, "lost"); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// nearHits fetches a key until the near cache serves it.
func nearHits(t *testing.T, c cache) {
	poll(t, "a near hit", func() bool {
		if _, err := c.Fetch(context.Background(), "n", time.Hour, value("v")); err != nil {
			t.Fatal(err)
		}
		return c.Stats().NearHits > 0
	})
}

// failOpen kills srv under c: calls fail open until the breaker opens; then
// srv comes back and the breaker closes.
func failOpen(t *testing.T, c cache, srv *redistest.Server) {
	srv.Kill()
	poll(t, "the breaker opening", func() bool {
		if v, err := c.Fetch(context.Background(), "f", time.Hour, value("v")); err != nil || string(v) != "v" {
			t.Fatalf("Fetch with Redis down = %q, %v; want the loader's value", v, err)
		}
		return c.Stats().BreakerOpen
	})
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	poll(t, "the breaker closing", func() bool {
		c.Fetch(context.Background(), "f", time.Hour, value("v"))
		return !c.Stats().BreakerOpen
	})
}

// outage cuts c off from Redis (proxy refuses connections) and back: a
// fail-open load, its value served from memory (fail-safe), a Delete
// queued and one dropped (c's queue holds one); during, if not nil, looks;
// then Redis comes back, the queued Delete reaches it (admin, a client of
// the server itself, sees the entry gone, and the dropped one's still
// there), the breaker closes, and a call takes the lease.
func outage(t *testing.T, c cache, proxy *redistest.Proxy, admin *redis.Client, during func(func() corral.Stats)) {
	ctx := context.Background()
	for _, k := range []string{"queued", "dropped"} {
		if err := c.Set(ctx, k, []byte("old"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if err := proxy.Refuse(true); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Fetch(ctx, "fs", time.Hour, value("v")); err != nil || string(v) != "v" {
		t.Fatalf("Fetch with Redis refusing = %q, %v; want the loader's value (fail-open)", v, err)
	}
	if v, err := c.Fetch(ctx, "fs", time.Hour, value("x")); err != nil || string(v) != "v" {
		t.Fatalf("Fetch again with Redis refusing = %q, %v; want the value held in memory (fail-safe)", v, err)
	}
	if err := c.Delete(ctx, "queued"); err == nil {
		t.Fatal("Delete with Redis refusing succeeded")
	}
	if err := c.Delete(ctx, "dropped"); err == nil {
		t.Fatal("Delete with Redis refusing, the queue full, succeeded")
	}
	poll(t, "the breaker opening", func() bool { return c.Stats().BreakerOpen })
	if st := c.Stats(); st.FailSafeHits != 1 || st.InvalidationsQueued != 1 || st.InvalidationsDropped != 1 || st.InvalidationsPending != 1 || st.OutageTime <= 0 {
		t.Fatalf("the Stats in the outage: %+v; want 1 fail-safe hit, 1 invalidation queued and pending, 1 dropped, time open", st)
	}
	if during != nil {
		during(c.Stats)
	}
	if err := proxy.Refuse(false); err != nil {
		t.Fatal(err)
	}
	poll(t, "the replay and the breaker closing", func() bool {
		st := c.Stats()
		return st.InvalidationsReplayed == 1 && st.InvalidationsPending == 0 && !st.BreakerOpen
	})
	for k, want := range map[string]int64{"queued": 0, "dropped": 1} {
		if n, err := admin.Exists(ctx, wire.EntryName(PrefixOutage, k)).Result(); err != nil || n != want {
			t.Fatalf("after the outage, the entry of %q exists %d times (%v); want %d", k, n, err, want)
		}
	}
	// The lease this call takes commits the value the fail-open load got a
	// moment ago rather than ask the origin again (corral's leasedLoad): a
	// call answered by another call's load, coalesced.
	if v, err := c.Fetch(ctx, "fs", time.Hour, value("w")); err != nil || string(v) != "v" {
		t.Fatalf("Fetch after the outage = %q, %v; want the fail-open load's value, committed under the lease", v, err)
	}
	if n, err := admin.Exists(ctx, wire.EntryName(PrefixOutage, "fs")).Result(); err != nil || n != 1 {
		t.Fatalf("after the outage, the entry of fs exists %d times (%v); want it stored", n, err)
	}
}
