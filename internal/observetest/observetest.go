// Package observetest runs one scripted set of Fetch calls against private
// redis-servers with a given corral.Observer, for the tests of corral's
// observation and of its adapters (corralprom, corralotel): every outcome of
// a call, loads and failed loads, a coalesced call, a wait for another
// process's load, a lost lease and a rejected commit, near hits, fail-open,
// a circuit breaker that opens and closes again, and an outage (a proxy in
// front of redis-server refuses connections): a fail-safe answer from
// memory, an invalidation queued and replayed once Redis is back, one
// dropped from a full queue, and the time the breaker was open. Run checks
// the Caches' Stats against the script's exact counts where they are
// deterministic and returns them, one Stats per prefix, for the caller to
// compare with what its Observer recorded (Events says what each Stats
// implies); RunDuring also lets the caller look during the outage.
package observetest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
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

// Want is what the script's two Caches of Prefix count, summed: the
// deterministic part of the run.
var Want = corral.Stats{
	Hits: 1, Misses: 8, NegativeHits: 1, FailureHits: 1, StaleHits: 2, StaleIfError: 1, Coalesced: 1,
	Loads: 7, LoadErrors: 2, Waits: 1, Refreshes: 1, RefreshErrors: 1, LeasesLost: 1, CommitsRejected: 1,
}

// WantOutage is what the Cache of PrefixOutage counts, but for
// BreakerOpens (at least 1) and OutageTime (more than 0): a fail-open load
// and its value served from memory while Redis refuses connections, a
// queued and a dropped invalidation (MaxPendingInvalidations is 1), the
// queued one replayed once Redis is back, and then a miss, whose lease
// commits the fail-open load's value (no second load).
var WantOutage = corral.Stats{
	FailOpens: 1, FailSafeHits: 1, Misses: 1, Loads: 1,
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
	a := newCache(t, srv.Client(), opts(Prefix))
	b := newCache(t, srv.Client(), opts(Prefix))
	calls(t, a, srv.Client())
	waitForOther(t, a, b)

	nearOpts := opts(PrefixNear)
	nearOpts.NearCache = corral.NearCacheOptions{Size: 100, TTL: time.Hour}
	n := newCache(t, srv.Client(), nearOpts)
	nearHits(t, n)

	down := redistest.Start(t)
	failOpts := opts(PrefixFailOpen)
	failOpts.BreakerCooldown = 50 * time.Millisecond
	f := newCache(t, down.Client(func(o *redis.Options) { o.DialTimeout = 200 * time.Millisecond }), failOpts)
	failOpen(t, f, down)

	proxy := redistest.StartProxy(t, srv.Addr)
	outOpts := opts(PrefixOutage)
	outOpts.MaxPendingInvalidations = 1
	outOpts.FailSafe.Throttle = time.Hour // the fail-open value is served however slow the machine
	outOpts.RedisTimeout = time.Minute    // and taken by the lease after the outage (leasedLoad keeps it RedisTimeout)
	out := newCache(t, srv.Client(func(o *redis.Options) { o.Addr = proxy.Addr }), outOpts)
	outage(t, out, proxy, srv.Client(), during)

	// Close waits for flights and background refreshes: every event has
	// been told once it returns.
	got := map[string]corral.Stats{}
	for _, c := range []struct {
		prefix string
		c      *corral.Cache
	}{{Prefix, a}, {Prefix, b}, {PrefixNear, n}, {PrefixFailOpen, f}, {PrefixOutage, out}} {
		if err := c.c.Close(); err != nil {
			t.Fatal(err)
		}
		got[c.prefix] = add(got[c.prefix], c.c.Stats())
	}
	if st := Counted(got[Prefix]); st != Want {
		t.Fatalf("the script's Stats of %q:\n%+v\nwant\n%+v", Prefix, st, Want)
	}
	if st := got[PrefixNear]; st.NearHits == 0 || st.Misses != 1 || st.Loads != 1 {
		t.Fatalf("the near cache's Stats: %+v; want near hits after 1 miss and 1 load", st)
	}
	// Each miss after the outage loads, or commits a fail-open load's value
	// ended less than RedisTimeout before (leasedLoad): FailOpens to
	// FailOpens + Misses loads.
	if st := got[PrefixFailOpen]; st.FailOpens == 0 || st.Loads < st.FailOpens || st.Loads > st.FailOpens+st.Misses || st.BreakerOpens == 0 || st.BreakerOpen || st.OutageTime <= 0 {
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

// calls runs one Cache's part of the script: each outcome, a coalesced
// call, a lost lease.
func calls(t *testing.T, c *corral.Cache, rdb *redis.Client) {
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
	poll(t, "the coalesced call", func() bool { return c.Stats().Coalesced == 1 })
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

// waitForOther has other wait for c's load of a key: a wait, and a miss
// for each.
func waitForOther(t *testing.T, c, other *corral.Cache) {
	release, done := hold(t, c, "w", "v")
	waited := make(chan error, 1)
	go func() {
		v, err := other.Fetch(context.Background(), "w", time.Hour, value("x"))
		if err == nil && string(v) != "v" {
			err = errors.New("the waiter got " + strconv.Quote(string(v)))
		}
		waited <- err
	}()
	poll(t, "the wait", func() bool { return other.Stats().Waits == 1 })
	release()
	if err := errors.Join(<-done, <-waited); err != nil {
		t.Fatal(err)
	}
}

// nearHits fetches a key until the near cache serves it.
func nearHits(t *testing.T, c *corral.Cache) {
	poll(t, "a near hit", func() bool {
		if _, err := c.Fetch(context.Background(), "n", time.Hour, value("v")); err != nil {
			t.Fatal(err)
		}
		return c.Stats().NearHits > 0
	})
}

// failOpen kills srv under c: calls fail open until the breaker opens; then
// srv comes back and the breaker closes.
func failOpen(t *testing.T, c *corral.Cache, srv *redistest.Server) {
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
// there), the breaker closes, and a call misses.
func outage(t *testing.T, c *corral.Cache, proxy *redistest.Proxy, admin *redis.Client, during func(func() corral.Stats)) {
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
	// A miss: the lease it takes commits the value the fail-open load got a
	// moment ago rather than ask the origin again (corral's leasedLoad).
	if v, err := c.Fetch(ctx, "fs", time.Hour, value("w")); err != nil || string(v) != "v" {
		t.Fatalf("Fetch after the outage = %q, %v; want the fail-open load's value, committed under the lease", v, err)
	}
	if n, err := admin.Exists(ctx, wire.EntryName(PrefixOutage, "fs")).Result(); err != nil || n != 1 {
		t.Fatalf("after the outage, the entry of fs exists %d times (%v); want it stored", n, err)
	}
}

// Counted returns the counters of st that the script checks (Want's and
// WantOutage's, and BreakerOpens), the others zero.
func Counted(st corral.Stats) corral.Stats {
	return corral.Stats{
		Hits: st.Hits, NearHits: st.NearHits, StaleHits: st.StaleHits, NegativeHits: st.NegativeHits,
		FailureHits: st.FailureHits, StaleIfError: st.StaleIfError, Misses: st.Misses, Coalesced: st.Coalesced,
		Loads: st.Loads, LoadErrors: st.LoadErrors, Waits: st.Waits, EarlyRefreshes: st.EarlyRefreshes,
		Refreshes: st.Refreshes, RefreshErrors: st.RefreshErrors, LeasesLost: st.LeasesLost,
		CommitsRejected: st.CommitsRejected, FailOpens: st.FailOpens, FailSafeHits: st.FailSafeHits,
		BreakerOpens: st.BreakerOpens, InvalidationsQueued: st.InvalidationsQueued,
		InvalidationsReplayed: st.InvalidationsReplayed, InvalidationsDropped: st.InvalidationsDropped,
	}
}

// Events returns how many events of each kind an Observer of the Caches
// that counted st is told: what the Stats imply (LoadStart and LoadEnd are
// both Loads; the failed LoadEnds are LoadErrors). Breaker events other
// than EventBreakerOpen are left out: Stats does not count them.
func Events(st corral.Stats) map[corral.EventKind]uint64 {
	return map[corral.EventKind]uint64{
		corral.EventHit:            st.Hits,
		corral.EventNearHit:        st.NearHits,
		corral.EventStaleHit:       st.StaleHits - st.StaleIfError,
		corral.EventStaleIfError:   st.StaleIfError,
		corral.EventNegativeHit:    st.NegativeHits,
		corral.EventFailureHit:     st.FailureHits,
		corral.EventMiss:           st.Misses,
		corral.EventFailOpen:       st.FailOpens,
		corral.EventFailSafe:       st.FailSafeHits,
		corral.EventCoalesced:      st.Coalesced,
		corral.EventLoadStart:      st.Loads,
		corral.EventLoadEnd:        st.Loads,
		corral.EventWaitStart:      st.Waits,
		corral.EventWaitEnd:        st.Waits,
		corral.EventLeaseLost:      st.LeasesLost,
		corral.EventCommitRejected: st.CommitsRejected,
		corral.EventBreakerOpen:    st.BreakerOpens,

		corral.EventInvalidationQueued:   st.InvalidationsQueued,
		corral.EventInvalidationReplayed: st.InvalidationsReplayed,
		corral.EventInvalidationDropped:  st.InvalidationsDropped,
	}
}

// Calls is how many calls the Caches that counted st answered: the sum of
// their outcomes.
func Calls(st corral.Stats) uint64 {
	return st.Hits + st.NearHits + st.StaleHits + st.NegativeHits + st.FailureHits + st.Misses + st.FailOpens + st.FailSafeHits
}

func newCache(t *testing.T, rdb redis.UniversalClient, o *corral.Options) *corral.Cache {
	t.Helper()
	c, err := corral.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func value(s string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return []byte(s), nil }
}

// hold starts a Fetch of key on c whose load returns val once release is
// called, and returns when that load has started; done gets the Fetch's
// error (or a wrong value's).
func hold(t *testing.T, c *corral.Cache, key, val string) (release func(), done <-chan error) {
	started, unblock, result := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		v, err := c.Fetch(context.Background(), key, time.Hour, func(context.Context) ([]byte, error) {
			close(started)
			<-unblock
			return []byte(val), nil
		})
		if err == nil && string(v) != val {
			err = errors.New("the holder got " + strconv.Quote(string(v)))
		}
		result <- err
	}()
	select {
	case <-started:
	case <-time.After(within):
		t.Fatalf("the load of %q did not start", key)
	}
	return func() { close(unblock) }, result
}

// pastSoftExpiry waits until the server's clock is past the soft expiry of
// the entry named entry.
func pastSoftExpiry(t *testing.T, rdb *redis.Client, entry string) {
	ctx := context.Background()
	soft, err := rdb.HGet(ctx, entry, "s").Int64()
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "the soft expiry", func() bool {
		now, err := rdb.Time(ctx).Result()
		return err == nil && now.UnixMilli() > soft
	})
}

// poll calls cond until it holds, every millisecond, for up to within.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.EventuallyEvery(t, within, time.Millisecond, what, cond)
}

// add returns the sum of a and b's counters, gauges (InvalidationsPending)
// and durations (OutageTime); BreakerOpen: either's.
func add(a, b corral.Stats) corral.Stats {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(b)
	for i := range va.NumField() {
		switch f := va.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(f.Uint() + vb.Field(i).Uint())
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + vb.Field(i).Int())
		case reflect.Bool:
			f.SetBool(f.Bool() || vb.Field(i).Bool())
		default:
			panic("observetest: add: Stats." + va.Type().Field(i).Name + " is of a kind add does not sum")
		}
	}
	return a
}
