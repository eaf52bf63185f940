package corral_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A Fetch's peek that finds no entry hands its callers over to the key's
// flight (peek.go, handOff): they wait for the flight's answer where they
// waited for the peek's, count as joined at once, and leave the flight as
// its own callers do.

// slowPeeks returns a Cache whose Redis answers every command lat late
// (a proxy), connected and with its scripts loaded: callers that start
// together all join one peek.
func slowPeeks(t *testing.T, srv *redistest.Server, lat time.Duration) *corral.Cache {
	t.Helper()
	proxy := redistest.StartProxy(t, srv.Addr)
	c := newCache(t, redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true}), nil)
	if _, err := c.Fetch(context.Background(), "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	proxy.Latency(lat)
	return c
}

func TestPeek_CallersHandedToTheFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := slowPeeks(t, e.srv, 50*time.Millisecond)
	before := c.Stats()
	const n = 50
	gate := make(chan struct{})
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) {
		loads.Add(1)
		<-gate
		return []byte("v"), nil
	}
	var wg sync.WaitGroup
	vals, errs := make([][]byte, n), make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vals[i], errs[i] = c.Fetch(context.Background(), "k", time.Minute, load)
		}()
	}
	// Counted as joined when the peek hands them over, before the load ends.
	eventually(t, 10*time.Second, "every other caller joined the flight", func() bool { return c.Stats().Joined-before.Joined == n-1 })
	close(gate)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || string(vals[i]) != "v" || &vals[i][0] != &vals[0][0] {
			t.Fatalf("caller %d: %q, %v; want the flight's shared value", i, vals[i], errs[i])
		}
	}
	st := c.Stats()
	if loads.Load() != 1 || st.Misses-before.Misses != 1 || st.Coalesced-before.Coalesced != n-1 || st.Joined-before.Joined != n-1 {
		t.Fatalf("%d loads, stats %+v; want 1 load, 1 miss and %d coalesced", loads.Load(), st, n-1)
	}
}

// Callers handed over to a flight that waits for another process's load
// leave it when their contexts end, and the last one cancels it: a caller
// that comes later starts a flight of its own instead of joining it.
func TestPeek_HandedCallersLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	finish := hold(t, e.c, "k", []byte("v"), nil)
	c := slowPeeks(t, e.srv, 30*time.Millisecond)
	before := c.Stats()
	const n = 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Fetch(ctx, "k", time.Minute, value("mine"))
		}()
	}
	eventually(t, 10*time.Second, "the callers wait for the holder's load", func() bool {
		st := c.Stats()
		return st.Waits-before.Waits == 1 && st.Joined-before.Joined == n-1
	})
	cancel()
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("caller %d: %v; want context.Canceled", i, err)
		}
	}
	joined := c.Stats().Joined
	finish()
	if v, err := c.Fetch(context.Background(), "k", time.Minute, value("mine")); err != nil || string(v) != "v" {
		t.Fatalf("later Fetch = %q, %v; want the holder's value", v, err)
	}
	if st := c.Stats(); st.Joined != joined {
		t.Fatalf("the later caller joined a flight (Joined %d, was %d): the cancelled one was still under way", st.Joined, joined)
	}
}

// Redis answers the peek (no entry), then goes silent on fetch.lua: the
// caller handed over to the flight is rescued before its deadline, its
// silence watched from when fetch.lua was sent, not from the peek (which
// was answered).
func TestPeek_HandedCallerRescued(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr}) // no inline reads: the peek goes through the pipeline
	t.Cleanup(func() { rdb.Close() })
	sha := scriptSHA(t, "fetch")
	var armed atomic.Bool
	f := &faults{}
	f.setBefore(func(cmd redis.Cmder) error {
		if armed.Load() && isScript(cmd, sha) {
			proxy.Blackhole(true) // the peek was answered; fetch.lua is not
		}
		return nil
	})
	rdb.AddHook(f)
	c := newCache(t, rdb, &corral.Options{RedisTimeout: 3 * time.Second}) // a 1.5 s deadline is rescued
	if _, err := c.Fetch(context.Background(), "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if v, err := c.Fetch(ctx, "k", time.Minute, slow(400*time.Millisecond, nil, "v")); err != nil || string(v) != "v" {
		t.Fatalf("Fetch = %q, %v; want the loader's value, rescued before the deadline", v, err)
	}
}

// Callers that find a peek under way join it and wait in Fetch's own
// frame (joinwait.go); when the peek finds the entry fresh, each is served
// it as a hit, as a caller that waited down in peekFor is, with or without
// a deadline.
func TestPeek_JoinersServedItsHit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	if _, err := e.c.Fetch(context.Background(), "k", time.Minute, value("v")); err != nil {
		t.Fatal(err)
	}
	c := slowPeeks(t, e.srv, 50*time.Millisecond)
	before := c.Stats()
	const n = 50
	vals, errs := concurrently(n, func(i int) ([]byte, error) {
		ctx := context.Background()
		if i%2 == 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Minute) // beyond any rescue
			defer cancel()
		}
		return c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
			return nil, errors.New("loaded: the entry was fresh")
		})
	}, nil)
	for i := range n {
		if errs[i] != nil || string(vals[i]) != "v" {
			t.Fatalf("caller %d: %q, %v; want the entry's value", i, vals[i], errs[i])
		}
	}
	// Not asserted: that none was handed to a flight. A peek whose group
	// records went older than Coherence on the way leaves the entry to
	// fetch.lua (3.10), whose flight serves it as a hit too.
	if st := c.Stats(); st.Hits-before.Hits != n || st.Misses != before.Misses {
		t.Fatalf("stats %+v (before %+v); want %d hits and no miss", st, before, n)
	}
}

// A stampede of FetchEntry or of Fetch[T] callers, who join the first's
// peek (and the flight it hands them to) and wait in their own frame as
// Cache.Fetch's do (joinwait.go): one load, every caller its value, all
// but one counted as coalesced.
func TestPeek_StampedeOfEachKind(t *testing.T) {
	t.Parallel()
	type record struct{ N int }
	kinds := map[string]func(c *corral.Cache, ctx context.Context, load func() []byte) (string, error){
		"FetchEntry": func(c *corral.Cache, ctx context.Context, load func() []byte) (string, error) {
			v, err := c.FetchEntry(ctx, "k", func(context.Context) (corral.Entry, error) {
				return corral.Entry{Value: load(), TTL: time.Minute}, nil
			})
			return string(v), err
		},
		"Fetch[T]": func(c *corral.Cache, ctx context.Context, load func() []byte) (string, error) {
			r, err := corral.Fetch(ctx, c, "k", time.Minute, func(context.Context) (record, error) {
				return record{N: len(load())}, nil
			})
			return strconv.Itoa(r.N), err
		},
	}
	for name, fetch := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			c := slowPeeks(t, e.srv, 50*time.Millisecond)
			before := c.Stats()
			gate := make(chan struct{})
			var loads atomic.Int32
			load := func() []byte {
				loads.Add(1)
				<-gate
				return []byte("vvv")
			}
			const n = 30
			vals, errs := concurrently(n, func(int) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				return fetch(c, ctx, load)
			}, func() {
				eventually(t, 10*time.Second, "every other caller joined the flight", func() bool { return c.Stats().Joined-before.Joined == n-1 })
				close(gate)
			})
			want := map[string]string{"FetchEntry": "vvv", "Fetch[T]": "3"}[name]
			for i := range n {
				if errs[i] != nil || vals[i] != want {
					t.Fatalf("caller %d: %q, %v; want %q", i, vals[i], errs[i], want)
				}
			}
			if st := c.Stats(); loads.Load() != 1 || st.Misses-before.Misses != 1 || st.Coalesced-before.Coalesced != n-1 {
				t.Fatalf("%d loads, stats %+v; want 1 load, 1 miss and %d coalesced", loads.Load(), st, n-1)
			}
		})
	}
}

// A Cache with a near cache (whose callers wait down in serve, the near
// lookup first: joinwait.go's shallow wait is not theirs): callers that
// miss it join the key's peek, or the flight it hands them to; a cold key
// is loaded once, a warm one is served to every caller (from Redis, or
// from the copy kept once the peek answered), and a later call is a near
// hit.
func TestPeek_NearCacheJoiners(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	proxy := redistest.StartProxy(t, e.srv.Addr)
	c := newCache(t, redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true}),
		&corral.Options{NearCache: corral.NearCacheOptions{Size: 100, TTL: time.Minute}})
	if _, err := c.Fetch(context.Background(), "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the near cache serves copies", func() bool {
		before := c.Stats().NearHits
		_, err := c.Fetch(context.Background(), "warm", time.Minute, value("w"))
		return err == nil && c.Stats().NearHits > before
	})
	if _, err := e.c.Fetch(context.Background(), "hot", time.Minute, value("v")); err != nil {
		t.Fatal(err)
	}
	proxy.Latency(30 * time.Millisecond)
	stampede := func(key string, load func(context.Context) ([]byte, error), joined func()) {
		t.Helper()
		const n = 30
		vals, errs := concurrently(n, func(int) ([]byte, error) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return c.Fetch(ctx, key, time.Minute, load)
		}, joined)
		for i := range n {
			if errs[i] != nil || string(vals[i]) != "v" {
				t.Fatalf("%s, caller %d: %q, %v; want %q", key, i, vals[i], errs[i], "v")
			}
		}
	}
	before := c.Stats()
	stampede("hot", func(context.Context) ([]byte, error) { return nil, errors.New("loaded: the entry was fresh") }, nil)
	if st := c.Stats(); st.Misses != before.Misses || st.Hits+st.NearHits-before.Hits-before.NearHits != 30 {
		t.Fatalf("hot: stats %+v (before %+v); want 30 hits, Redis or near, and no miss", st, before)
	}
	var loads atomic.Int32
	gate := make(chan struct{})
	before = c.Stats()
	stampede("cold", func(context.Context) ([]byte, error) { loads.Add(1); <-gate; return []byte("v"), nil }, func() {
		eventually(t, 10*time.Second, "every other caller joined the flight", func() bool { return c.Stats().Joined-before.Joined == 29 })
		close(gate)
	})
	if st := c.Stats(); loads.Load() != 1 || st.Misses-before.Misses != 1 || st.Coalesced-before.Coalesced != 29 {
		t.Fatalf("cold: %d loads, stats %+v (before %+v); want 1 load, 1 miss, 29 coalesced", loads.Load(), st, before)
	}
	eventually(t, 10*time.Second, "a later call is a near hit", func() bool {
		before := c.Stats().NearHits
		v, err := c.Fetch(context.Background(), "hot", time.Minute, value("x"))
		return err == nil && string(v) == "v" && c.Stats().NearHits > before
	})
}

// concurrently calls call(i) in n goroutines, one for each i, runs
// meanwhile (when not nil) while they are under way, and returns what each
// call returned once all have.
func concurrently[V any](n int, call func(i int) (V, error), meanwhile func()) ([]V, []error) {
	var wg sync.WaitGroup
	vals, errs := make([]V, n), make([]error, n)
	for i := range n {
		wg.Go(func() { vals[i], errs[i] = call(i) })
	}
	if meanwhile != nil {
		meanwhile()
	}
	wg.Wait()
	return vals, errs
}
