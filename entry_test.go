package corral_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// entryOf returns a FetchEntry loader that counts its runs in n and returns
// v with ttl and stale.
func entryOf(n *atomic.Int32, v string, ttl, stale time.Duration) func(context.Context) (corral.Entry, error) {
	return func(context.Context) (corral.Entry, error) {
		if n != nil {
			n.Add(1)
		}
		return corral.Entry{Value: []byte(v), TTL: ttl, StaleTTL: stale}, nil
	}
}

// storedTTLs reads key's entry: its soft TTL left (field s against the
// server's clock) and its Redis TTL (the hard TTL left).
func storedTTLs(t *testing.T, rdb *redis.Client, key string) (soft, hard time.Duration) {
	t.Helper()
	ctx := context.Background()
	s, err := rdb.HGet(ctx, entryName(key), "s").Int64()
	if err != nil {
		t.Fatalf("%s: no entry: %v", key, err)
	}
	soft = time.Duration(s-serverMillis(t, rdb)) * time.Millisecond
	return soft, rdb.PTTL(ctx, entryName(key)).Val()
}

// about reports whether got is want, less at most the time spent since the
// write (the read of the test comes after it): 5 s, for a machine loaded
// with other tests (a second was seen exceeded at -count=20). The TTLs
// compared are minutes apart, and Jitter's ±10% of them far beyond 5 s
// (of 90 s, 9 s: five draws all within 5 s below are 1 in 600).
func about(got, want time.Duration) bool {
	return got <= want && got > want-5*time.Second
}

// Each key is stored for its own Entry's TTL, exactly (Jitter is on, at its
// default, and does not spread it), and lives its stale window longer:
// Options.StaleTTL when the Entry's is 0, none when it is < 0.
func TestFetchEntry_TTLStoredExactly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{StaleTTL: 10 * time.Minute})
	ctx := context.Background()
	keys := []struct {
		key        string
		ttl, stale time.Duration
		soft, hard time.Duration // want
	}{
		{"short", 90 * time.Second, -1, 90 * time.Second, 90 * time.Second},
		{"long", 30 * time.Minute, 5 * time.Minute, 30 * time.Minute, 35 * time.Minute},
		{"options-window", time.Hour, 0, time.Hour, time.Hour + 10*time.Minute},
		{"forever", math.MaxInt64, -1, corral.MaxTTL, corral.MaxTTL},
		{"window-capped", time.Minute, math.MaxInt64, time.Minute, time.Minute + corral.MaxTTL},
	}
	for _, k := range keys {
		for range 5 { // each is the same: exact, not drawn
			if err := e.rdb.Del(ctx, entryName(k.key)).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := e.c.FetchEntry(ctx, k.key, entryOf(nil, k.key, k.ttl, k.stale)); err != nil || string(v) != k.key {
				t.Fatalf("%s: FetchEntry = %q, %v", k.key, v, err)
			}
			soft, hard := storedTTLs(t, e.rdb, k.key)
			if !about(soft, k.soft) || !about(hard, k.hard) {
				t.Fatalf("%s: stored soft TTL %v, hard %v; want %v and %v", k.key, soft, hard, k.soft, k.hard)
			}
		}
	}
	if st := e.c.Stats(); st.Loads != 25 || st.Uncached != 0 {
		t.Fatalf("stats %+v; want 25 loads, none uncached", st)
	}
}

// A token loaded with its own expiry is never served after it: from Redis
// (the peek and fetch.lua), nor from the near cache, although the Cache has
// a stale window (StaleTTL -1 turns it off for the token) and Jitter.
func TestFetchEntry_TokenNeverServedExpired(t *testing.T) {
	t.Parallel()
	for _, near := range []bool{false, true} {
		t.Run(fmt.Sprintf("near=%v", near), func(t *testing.T) {
			opts := func() *corral.Options {
				o := &corral.Options{StaleTTL: time.Minute}
				if near {
					o.NearCache = corral.NearCacheOptions{Size: 100, TTL: time.Minute}
				}
				return o
			}
			e := newEnv(t, opts())
			other := newCache(t, e.srv.Client(), opts())
			const life = 400 * time.Millisecond
			var mu sync.Mutex
			expires := map[string]time.Time{} // by token
			var issued atomic.Int32
			issue := func(context.Context) (corral.Entry, error) {
				tok := "token-" + strconv.Itoa(int(issued.Add(1)))
				mu.Lock()
				expires[tok] = time.Now().Add(life)
				mu.Unlock()
				return corral.Entry{Value: []byte(tok), TTL: life, StaleTTL: -1}, nil
			}
			// The soft expiry is capped at the loader's deadline on the
			// server's clock, estimated early, so a commit delayed on its
			// way to Redis does not lengthen it. What remains is the
			// server clock's ms and the instant between the loader's
			// return and corral's reading of the clock: a margin of 20 ms
			// (jitter would be up to 40).
			const transit = 20 * time.Millisecond
			deadline := time.Now().Add(10 * time.Second)
			var wg sync.WaitGroup
			for i := range 4 {
				c := e.c
				if i%2 == 1 {
					c = other
				}
				wg.Go(func() {
					for issued.Load() < 4 && time.Now().Before(deadline) {
						start := time.Now()
						v, err := c.FetchEntry(context.Background(), "token", issue)
						if err != nil {
							t.Errorf("FetchEntry: %v", err)
							return
						}
						mu.Lock()
						exp, ok := expires[string(v)]
						mu.Unlock()
						if !ok || !start.Before(exp.Add(transit)) {
							t.Errorf("a call that began at %v got %q, which expired at %v", start, v, exp)
							return
						}
					}
				})
			}
			wg.Wait()
			if n := issued.Load(); n < 4 {
				t.Fatalf("%d tokens issued in 10s; want a new one every %v", n, life)
			}
			if near && e.c.Stats().NearHits+other.Stats().NearHits == 0 {
				t.Fatal("no near hits: the near cache was not tested")
			}
		})
	}
}

// An Entry with TTL <= 0 is returned to the callers of its load, not
// stored: a waiter in another process loads it itself, and so does every
// later call.
func TestFetchEntry_TTLNotPositiveIsNotStored(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, -time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			e := newEnv(t, nil)
			other := newCache(t, e.srv.Client(), nil)
			ctx := context.Background()
			started, release := make(chan struct{}), make(chan struct{})
			first := make(chan string, 1)
			go func() {
				v, err := e.c.FetchEntry(ctx, "k", func(context.Context) (corral.Entry, error) {
					close(started)
					<-release
					return corral.Entry{Value: []byte("a"), TTL: ttl}, nil
				})
				if err != nil {
					t.Errorf("the holder's FetchEntry: %v", err)
				}
				first <- string(v)
			}()
			<-started
			var otherLoads atomic.Int32
			second := make(chan string, 1)
			go func() {
				v, err := other.FetchEntry(ctx, "k", entryOf(&otherLoads, "b", ttl, 0))
				if err != nil {
					t.Errorf("the waiter's FetchEntry: %v", err)
				}
				second <- string(v)
			}()
			waitSubscribed(t, e.rdb, wire.NewNames("corral", "k").Notice, 1) // the other process waits for the holder
			close(release)
			if a, b := <-first, <-second; a != "a" || b != "b" || otherLoads.Load() != 1 {
				t.Fatalf("holder got %q, waiter %q after %d loads of its own; want a, and b loaded by the waiter", a, b, otherLoads.Load())
			}
			if n := e.rdb.Exists(ctx, entryName("k")).Val(); n != 0 {
				t.Fatal("an Entry with TTL <= 0 was stored")
			}
			if v, err := e.c.FetchEntry(ctx, "k", entryOf(nil, "c", ttl, 0)); err != nil || string(v) != "c" {
				t.Fatalf("a later FetchEntry = %q, %v; want its own load's c", v, err)
			}
			st, ost := e.c.Stats(), other.Stats()
			// The waiter's load is not stored either, as the notice said. It
			// loads on the notice, or, on a busy machine, may find the lease
			// free first and take it: then its load too is a decision not to
			// store. Either way it loads once (above).
			if st.Uncached != 2 || ost.Uncached > 1 || st.ValuesTooLarge+ost.ValuesTooLarge != 0 {
				t.Fatalf("stats %+v and %+v; want 2 and at most 1 uncached, none too large", st, ost)
			}
		})
	}
}

// An Entry with a stale window is served stale while one caller, across
// two processes, refreshes it in the background, although Options.StaleTTL
// is 0; the refresh runs the loader of the call that saw it stale, and its
// Entry sets the new TTL.
func TestFetchEntry_StaleWindow(t *testing.T) {
	t.Parallel()
	opts := func() *corral.Options { return &corral.Options{DisableEarlyRefresh: true} }
	e := newEnv(t, opts())
	other := newCache(t, e.srv.Client(), opts())
	ctx := context.Background()
	if _, err := e.c.FetchEntry(ctx, "k", entryOf(nil, "old", 200*time.Millisecond, time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitStale(t, e.rdb, entryName("k"))

	var refreshes atomic.Int32
	release := make(chan struct{})
	refresh := func(context.Context) (corral.Entry, error) {
		refreshes.Add(1)
		<-release
		return corral.Entry{Value: []byte("new"), TTL: 42 * time.Minute, StaleTTL: -1}, nil
	}
	var wg sync.WaitGroup
	for i := range 20 {
		c := e.c
		if i%2 == 1 {
			c = other
		}
		wg.Go(func() {
			t0 := time.Now()
			v, err := c.FetchEntry(ctx, "k", refresh)
			if took := time.Since(t0); err != nil || string(v) != "old" || took > prompt {
				t.Errorf("FetchEntry = %q, %v after %v; want the stale value at once", v, err, took)
			}
		})
	}
	wg.Wait()
	close(release)
	eventually(t, 5*time.Second, "the refresh is stored", func() bool {
		v, err := e.c.Get(ctx, "k")
		return err == nil && string(v) == "new"
	})
	if n := refreshes.Load(); n != 1 {
		t.Fatalf("%d refreshes; want 1", n)
	}
	if soft, hard := storedTTLs(t, e.rdb, "k"); !about(soft, 42*time.Minute) || !about(hard, 42*time.Minute) {
		t.Fatalf("refreshed entry: soft TTL %v, hard %v; want the refresh's Entry's 42m, no window", soft, hard)
	}
	if st, ost := e.c.Stats(), other.Stats(); st.StaleHits+ost.StaleHits != 20 || st.Refreshes+ost.Refreshes != 1 {
		t.Fatalf("stats %+v and %+v; want 20 stale hits and 1 refresh", st, ost)
	}
}

// An Entry's StaleTTL < 0 overrides Options.StaleTTL: past its TTL the
// entry is gone, and the next call waits for a load.
func TestFetchEntry_NoWindowOverridesOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{StaleTTL: time.Hour})
	ctx := context.Background()
	if _, err := e.c.FetchEntry(ctx, "k", entryOf(nil, "old", 100*time.Millisecond, -1)); err != nil {
		t.Fatal(err)
	}
	// Gone already (a loaded machine may take 100 ms to get here) is no
	// window too: PTTL says -2 then.
	if hard := e.rdb.PTTL(ctx, entryName("k")).Val(); hard > 100*time.Millisecond {
		t.Fatalf("hard TTL %v; want the Entry's 100ms, no window", hard)
	}
	eventually(t, 5*time.Second, "the entry expires", func() bool {
		return e.rdb.Exists(ctx, entryName("k")).Val() == 0
	})
	var loads atomic.Int32
	if v, err := e.c.FetchEntry(ctx, "k", entryOf(&loads, "new", time.Minute, -1)); err != nil || string(v) != "new" || loads.Load() != 1 {
		t.Fatalf("FetchEntry = %q, %v after %d loads; want a load's new", v, err, loads.Load())
	}
	if st := e.c.Stats(); st.StaleHits != 0 {
		t.Fatalf("%d stale hits; want none", st.StaleHits)
	}
}

// XFetch refreshes early only an entry without a stale window: with a Beta
// so large that every call of an entry without one refreshes it, an entry
// with a window of its own is never refreshed before it is stale.
func TestFetchEntry_NoEarlyRefreshWithAWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{Beta: 1e9})
	ctx := context.Background()
	loader := func(n *atomic.Int32, stale time.Duration) func(context.Context) (corral.Entry, error) {
		return func(ctx context.Context) (corral.Entry, error) {
			n.Add(1)
			v, err := slow(5*time.Millisecond, nil, "v")(ctx) // a load that takes time: XFetch weighs it
			return corral.Entry{Value: v, TTL: time.Hour, StaleTTL: stale}, err
		}
	}
	var windowed, plain atomic.Int32
	for range 50 {
		if _, err := e.c.FetchEntry(ctx, "windowed", loader(&windowed, time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if n := windowed.Load(); n != 1 || e.c.Stats().EarlyRefreshes != 0 {
		t.Fatalf("an entry with a window: %d loads, %d early refreshes; want 1 and none", n, e.c.Stats().EarlyRefreshes)
	}
	eventually(t, 5*time.Second, "early refreshes of an entry without a window", func() bool {
		if _, err := e.c.FetchEntry(ctx, "plain", loader(&plain, -1)); err != nil {
			t.Fatal(err)
		}
		return e.c.Stats().EarlyRefreshes > 0 && plain.Load() > 1
	})
}

// FetchEntry returns the errors Fetch does, from the same checks, and
// caches ErrNotFound as a negative entry.
func TestFetchEntry_Errors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{LoadTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	if _, err := e.c.FetchEntry(ctx, "k", nil); !errors.Is(err, corral.ErrNilLoader) {
		t.Errorf("nil loader: %v; want ErrNilLoader", err)
	}
	if _, err := e.c.FetchEntry(ctx, "", entryOf(nil, "v", time.Minute, 0)); !errors.Is(err, corral.ErrInvalidKey) {
		t.Errorf("empty key: %v; want ErrInvalidKey", err)
	}
	if _, err := e.c.FetchEntry(cancelled(), "k", entryOf(nil, "v", time.Minute, 0)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v; want context.Canceled", err)
	}
	boom := errors.New("origin down")
	if _, err := e.c.FetchEntry(ctx, "failing", func(context.Context) (corral.Entry, error) {
		return corral.Entry{Value: []byte("ignored"), TTL: time.Minute}, boom
	}); !errors.Is(err, boom) {
		t.Errorf("loader error: %v; want it", err)
	}
	if n := e.rdb.Exists(ctx, entryName("failing")).Val(); n != 0 {
		t.Error("a failed load was stored")
	}
	var pe *corral.PanicError
	if _, err := e.c.FetchEntry(ctx, "panics", func(context.Context) (corral.Entry, error) { panic("oops") }); !errors.As(err, &pe) || pe.Value != "oops" {
		t.Errorf("panicking loader: %v; want a *PanicError", err)
	}
	if _, err := e.c.FetchEntry(ctx, "hangs", func(ctx context.Context) (corral.Entry, error) {
		<-ctx.Done()
		return corral.Entry{}, ctx.Err()
	}); !errors.Is(err, corral.ErrLoadTimeout) {
		t.Errorf("hanging loader: %v; want ErrLoadTimeout", err)
	}

	var loads atomic.Int32
	missing := func(context.Context) (corral.Entry, error) {
		loads.Add(1)
		return corral.Entry{TTL: time.Hour}, fmt.Errorf("no row: %w", corral.ErrNotFound)
	}
	for range 3 {
		if _, err := e.c.FetchEntry(ctx, "missing", missing); !errors.Is(err, corral.ErrNotFound) {
			t.Fatalf("not found: %v; want ErrNotFound", err)
		}
	}
	if _, hard := storedTTLs(t, e.rdb, "missing"); loads.Load() != 1 || hard > 11*time.Second || hard < 8*time.Second {
		t.Errorf("not found: %d loads, cached for %v; want 1 load, cached for NegativeTTL (10s ±10%%), not the Entry's hour", loads.Load(), hard)
	}

	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.FetchEntry(ctx, "k", entryOf(nil, "v", time.Minute, 0)); !errors.Is(err, corral.ErrClosed) {
		t.Errorf("closed Cache: %v; want ErrClosed", err)
	}
}

// 200 goroutines in each of two Caches ask for one key at once: one load.
func TestFetchEntry_OneLoadAcrossCaches(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	caches := []*corral.Cache{e.c, newCache(t, e.srv.Client(), nil)}
	var loads atomic.Int32
	load := func(ctx context.Context) (corral.Entry, error) {
		v, err := slow(100*time.Millisecond, &loads, "v")(ctx)
		return corral.Entry{Value: v, TTL: time.Minute}, err
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range caches {
		for range 200 {
			wg.Go(func() {
				<-start
				if v, err := c.FetchEntry(context.Background(), "hot", load); err != nil || string(v) != "v" {
					t.Errorf("FetchEntry = %q, %v", v, err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads; want 1", n)
	}
}

// Fetch and FetchEntry calls of one key in one process share a flight:
// the flight's load decides the value and how long it is stored.
func TestFetchEntry_SharesFetchFlights(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{DisableJitter: true})
	ctx := context.Background()

	// A FetchEntry joins a Fetch's flight: Fetch's value, for Fetch's ttl.
	started, release := make(chan struct{}), make(chan struct{})
	fetched := make(chan string, 1)
	go func() {
		v, _ := e.c.Fetch(ctx, "a", 7*time.Minute, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return []byte("fetch's"), nil
		})
		fetched <- string(v)
	}()
	<-started
	joined := make(chan string, 1)
	go func() {
		v, _ := e.c.FetchEntry(ctx, "a", entryOf(nil, "entry's", time.Hour, -1))
		joined <- string(v)
	}()
	eventually(t, 5*time.Second, "the FetchEntry joins", func() bool { return e.c.Stats().Joined == 1 })
	close(release)
	if a, b := <-fetched, <-joined; a != "fetch's" || b != "fetch's" {
		t.Fatalf("Fetch got %q, the FetchEntry that joined it %q; want fetch's for both", a, b)
	}
	if soft, _ := storedTTLs(t, e.rdb, "a"); !about(soft, 7*time.Minute) {
		t.Fatalf("soft TTL %v; want Fetch's 7m", soft)
	}

	// A Fetch joins a FetchEntry's flight: the Entry's value, for its TTL.
	started, release = make(chan struct{}), make(chan struct{})
	go func() {
		v, _ := e.c.FetchEntry(ctx, "b", func(context.Context) (corral.Entry, error) {
			close(started)
			<-release
			return corral.Entry{Value: []byte("entry's"), TTL: 3 * time.Minute, StaleTTL: -1}, nil
		})
		fetched <- string(v)
	}()
	<-started
	go func() {
		v, _ := e.c.Fetch(ctx, "b", time.Hour, value("fetch's"))
		joined <- string(v)
	}()
	eventually(t, 5*time.Second, "the Fetch joins", func() bool { return e.c.Stats().Joined == 2 })
	close(release)
	if a, b := <-fetched, <-joined; a != "entry's" || b != "entry's" {
		t.Fatalf("FetchEntry got %q, the Fetch that joined it %q; want entry's for both", a, b)
	}
	if soft, _ := storedTTLs(t, e.rdb, "b"); !about(soft, 3*time.Minute) {
		t.Fatalf("soft TTL %v; want the Entry's 3m", soft)
	}
}

// A call that begins after a value's TTL ended is not served that value by
// a flight it joins, though the flight, under way since before, is still
// to answer with it: here the load's commit (own load), or the notice of
// another process's load, is held back (CLIENT PAUSE WRITE) until the
// joiner has joined. The joiner asks Redis again and loads the next token;
// the callers that began before the TTL ended get the one they waited for.
// The late caller is a FetchEntry, or a FetchManyEntries of the key.
func TestFetchEntry_LateJoinerNotServedExpired(t *testing.T) {
	t.Parallel()
	for _, near := range []bool{false, true} {
		for _, elsewhere := range []bool{false, true} {
			for _, many := range []bool{false, true} {
				t.Run(fmt.Sprintf("near=%v/load-elsewhere=%v/many=%v", near, elsewhere, many), func(t *testing.T) {
					lateJoiner(t, near, elsewhere, many)
				})
			}
		}
	}
}

// lateJoiner is TestFetchEntry_LateJoinerNotServedExpired's: with a near
// cache or not, the joiner in the process that loads or in another, a
// FetchManyEntries or a FetchEntry.
func lateJoiner(t *testing.T, near, elsewhere, many bool) {
	opts := func() *corral.Options {
		o := &corral.Options{}
		if near {
			o.NearCache = corral.NearCacheOptions{Size: 100, TTL: time.Minute}
		}
		return o
	}
	e := newEnv(t, opts())
	waiter := e.c
	parked := make(chan struct{}) // the other process's waiter waits for the notice alone
	if elsewhere {
		waiter = newCache(t, e.srv.Client(), opts())
		var once sync.Once
		corral.SetOnParked(waiter, func(string) { once.Do(func() { close(parked) }) })
	}
	ctx := context.Background()
	const life = 50 * time.Millisecond
	var issued atomic.Int32
	var expires atomic.Int64 // token-1's, Unix ns
	started, proceed := make(chan struct{}), make(chan struct{})
	issue := func(context.Context) (corral.Entry, error) {
		n := issued.Add(1)
		if n == 1 {
			close(started)
			<-proceed
			// Writes wait from now on: this load's commit, and its notice.
			if err := e.rdb.Do(ctx, "CLIENT", "PAUSE", 20000, "WRITE").Err(); err != nil {
				t.Errorf("CLIENT PAUSE: %v", err)
			}
			expires.Store(time.Now().Add(life).UnixNano())
		}
		return corral.Entry{Value: []byte("token-" + strconv.Itoa(int(n))), TTL: life, StaleTTL: -1}, nil
	}
	unpause := func() { e.rdb.Do(ctx, "CLIENT", "UNPAUSE") }
	t.Cleanup(unpause)
	issueMany := func(ctx context.Context, keys []string) (map[string]corral.Entry, error) {
		e, err := issue(ctx)
		return map[string]corral.Entry{"token": e}, err
	}
	fetch := func(c *corral.Cache, many bool) <-chan string {
		got := make(chan string, 1)
		go func() {
			var v []byte
			var err error
			if many {
				var m map[string][]byte
				m, err = c.FetchManyEntries(ctx, []string{"token"}, issueMany)
				v = m["token"]
			} else {
				v, err = c.FetchEntry(ctx, "token", issue)
			}
			if err != nil {
				t.Errorf("fetch: %v", err)
			}
			got <- string(v)
		}()
		return got
	}
	holder := fetch(e.c, false)
	<-started
	var first <-chan string // a caller in the other process, waiting since before the load ended
	if elsewhere {
		first = fetch(waiter, false)
		// Parked, subscribed: no fetch.lua of its own can reach Redis
		// behind the commit and find the entry gone.
		select {
		case <-parked:
		case <-time.After(5 * time.Second):
			t.Fatal("the other process's caller did not wait for the notice within 5s")
		}
	}
	close(proceed)
	// expires is read before the loader returns, from which the TTL
	// counts: a margin, lest the late caller join just in time.
	const margin = 100 * time.Millisecond
	eventually(t, 5*time.Second, "token-1's TTL ends", func() bool {
		return expires.Load() != 0 && time.Now().UnixNano() > expires.Load()+int64(margin)
	})
	joinedBefore := waiter.Stats().Joined
	late := fetch(waiter, many)
	eventually(t, 5*time.Second, "the late caller joins the flight under way", func() bool {
		return waiter.Stats().Joined > joinedBefore
	})
	unpause()
	if v := <-holder; v != "token-1" {
		t.Errorf("the holder got %q; want token-1, which it loaded", v)
	}
	if first != nil {
		if v := <-first; v != "token-1" {
			t.Errorf("the caller waiting in the other process got %q; want token-1", v)
		}
	}
	if v := <-late; v != "token-2" {
		t.Errorf("the caller that began after token-1 expired got %q; want token-2", v)
	}
}

// A flight's fetch.lua that found the entry fresh (a HIT) answers no caller
// that joined after the entry's TTL ended while the reply was on its way:
// the first caller's peek picks the token for an early refresh (XFetch,
// Beta huge), its flight's fetch.lua finds it fresh, and a proxy holds the
// HIT back until the TTL has ended and a late caller has joined.
func TestFetchEntry_LateJoinerOfAHitInTransit(t *testing.T) {
	t.Parallel()
	x, y, proxy, fetch := transit(t, &corral.Options{Beta: 1e6, Rand: func() float64 { return 0.5 }})
	ctx := context.Background()
	const life = 300 * time.Millisecond
	var expires time.Time
	if _, err := x.FetchEntry(ctx, "token", func(context.Context) (corral.Entry, error) {
		time.Sleep(5 * time.Millisecond) // the origin's time: stored, so that XFetch can pick the entry
		expires = time.Now().Add(life)
		return corral.Entry{Value: []byte("token-1"), TTL: life, StaleTTL: -1}, nil
	}); err != nil {
		t.Fatal(err)
	}
	held, release := proxy.HoldReply([]byte("HIT"))
	t.Cleanup(release)
	first := fetch()
	heldBack(t, held, "HIT from fetch.lua")
	const margin = 100 * time.Millisecond // expires is read before the loader returns, from which the TTL counts
	eventually(t, 5*time.Second, "token-1's TTL ends", func() bool { return time.Now().After(expires.Add(margin)) })
	joinedBefore := y.Stats().Joined
	late := fetch()
	eventually(t, 5*time.Second, "the late caller joins the flight under way", func() bool {
		return y.Stats().Joined > joinedBefore
	})
	release()
	if v := <-first; v != "token-1" {
		t.Errorf("the first caller got %q; want token-1, fresh when its fetch.lua ran", v)
	}
	if v := <-late; v == "token-1" {
		t.Errorf("the caller that began %v after token-1 expired got it", margin)
	}
}

// A flight's fetch.lua that served the entry stale (stale-while-revalidate)
// answers no caller that joined after the entry's stale window ended while
// the reply was on its way: the window bounds a stale answer as the TTL
// bounds a fresh one.
func TestFetchEntry_LateJoinerOfAStaleAnswer(t *testing.T) {
	t.Parallel()
	x, y, proxy, fetch := transit(t, nil)
	ctx := context.Background()
	const life, window = 100 * time.Millisecond, time.Second
	var soft time.Time
	if _, err := x.FetchEntry(ctx, "token", func(context.Context) (corral.Entry, error) {
		soft = time.Now().Add(life)
		return corral.Entry{Value: []byte("token-1"), TTL: life, StaleTTL: window}, nil
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "token-1 goes stale", func() bool { return time.Now().After(soft.Add(20 * time.Millisecond)) })
	held, release := proxy.HoldReply([]byte("STALE"))
	t.Cleanup(release)
	first := fetch()
	heldBack(t, held, "STALE from fetch.lua")
	// A caller that joins within the window is served stale, as the first.
	joinedBefore := y.Stats().Joined
	within := fetch()
	eventually(t, 5*time.Second, "a caller joins within the stale window", func() bool { return y.Stats().Joined > joinedBefore })
	if time.Now().After(soft.Add(window)) {
		t.Fatalf("the caller within the window joined %v after it ended (the machine is too slow for this test)", time.Since(soft.Add(window)))
	}
	const margin = 100 * time.Millisecond
	eventually(t, 5*time.Second, "token-1's stale window ends", func() bool {
		return time.Now().After(soft.Add(window + margin))
	})
	joinedBefore = y.Stats().Joined
	late := fetch()
	eventually(t, 5*time.Second, "the late caller joins the flight under way", func() bool {
		return y.Stats().Joined > joinedBefore
	})
	release()
	if v := <-first; v != "token-1" {
		t.Errorf("the first caller got %q; want token-1, stale when its fetch.lua ran", v)
	}
	if v := <-within; v != "token-1" {
		t.Errorf("the caller that joined within the stale window got %q; want token-1", v)
	}
	if v := <-late; v == "token-1" {
		t.Errorf("the caller that began %v after token-1's stale window ended got it", margin)
	}
}

// transit starts a test's two Caches on one Redis: x direct, y behind
// proxy, with y's opts, its connections and scripts ready. fetch starts a
// FetchEntry of "token" on y, whose loads issue token-2, token-3... fresh
// for a minute, and returns the value it gets.
func transit(t *testing.T, opts *corral.Options) (x, y *corral.Cache, proxy *redistest.Proxy, fetch func() <-chan string) {
	t.Helper()
	srv := redistest.Start(t)
	x, proxy = newCache(t, srv.Client(), nil), redistest.StartProxy(t, srv.Addr)
	y = newCache(t, redis.NewClient(&redis.Options{Addr: proxy.Addr}), opts)
	ctx := context.Background()
	if _, err := y.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	var issued atomic.Int32
	issue := func(context.Context) (corral.Entry, error) {
		return corral.Entry{Value: []byte("token-" + strconv.Itoa(int(issued.Add(1))+1)), TTL: time.Minute, StaleTTL: -1}, nil
	}
	fetch = func() <-chan string {
		got := make(chan string, 1)
		go func() {
			v, err := y.FetchEntry(ctx, "token", issue)
			if err != nil {
				t.Errorf("FetchEntry: %v", err)
			}
			got <- string(v)
		}()
		return got
	}
	return x, y, proxy, fetch
}

// heldBack waits, 5 s at most, for proxy to hold back the reply held says.
func heldBack(t *testing.T, held <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s held back within 5s", what)
	}
}
