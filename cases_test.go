package corral_test

// The failure cases from production incidents (C01-C11), one test each, against a real
// redis-server. "Process" here is an independent Cache with its own client
// unless the case is about OS processes (see multiprocess_test.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Tests assert loose bounds on time: they catch a hang, a poll or a wait
// for the wrong timer, not latency, since a CI machine may be busy with
// other work and -race slows everything. The tight figures are measured by
// benchmarks (bench_test.go).
const (
	// slack is how long after its deadline a caller's wait may end.
	slack = 500 * time.Millisecond
	// prompt is "at once": well under any lease, load or retry time the
	// tests use.
	prompt = time.Second
)

func TestCase_C01_StalledLoader(t *testing.T) {
	// Above a caller's deadline + slack, so that a caller waiting for the
	// load instead of its own deadline is caught.
	const loadTimeout = time.Second
	e := newEnv(t, &corral.Options{LoadTimeout: loadTimeout, LeaseTTL: time.Second})
	ctx := context.Background()
	// Warm the client's connections and the Cache so the baseline holds them.
	if _, err := e.c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	baseline := runtime.NumGoroutine()

	release := make(chan struct{})
	var runs atomic.Int32
	stalled := func(context.Context) ([]byte, error) { // ignores its context
		runs.Add(1)
		<-release
		return []byte("late"), nil
	}

	var wg sync.WaitGroup
	var failures atomic.Int32
	began := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := range 200 {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := e.c.Fetch(cctx, "{K}", time.Minute, stalled)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || took > 100*time.Millisecond+slack {
				failures.Add(1)
				t.Errorf("K caller: err %v after %v; want DeadlineExceeded within 100ms + %v", err, took, slack)
			}
		}()
		if i%10 == 5 { // K2's callers, every 100ms among K's, are unaffected
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				k2 := "{K2}:" + strconv.Itoa(i) // a cold key each time: a load, not just a hit
				if v, err := e.c.Fetch(cctx, k2, time.Minute, value("v2")); err != nil || string(v) != "v2" {
					failures.Add(1)
					t.Errorf("K2 call = %q, %v", v, err)
				}
			}()
		}
	}
	arrivals := time.Since(began) // 2s, longer on a busy machine
	wg.Wait()
	if failures.Load() > 0 {
		t.FailNow()
	}
	// Each dropped flight released its lease and the next caller ran the
	// loader again: a run per LoadTimeout while callers kept arriving.
	if n, most := runs.Load(), int32(arrivals/loadTimeout)+1; n < 2 || n > most {
		t.Fatalf("loader ran %d times over %v with LoadTimeout %v, want 2..%d", n, arrivals, loadTimeout, most)
	}
	// After LoadTimeout the last flight is dropped and its lease released.
	lease := leaseName("K")
	eventually(t, loadTimeout+time.Second, "the stalled load's lease is released", func() bool {
		return e.rdb.Exists(ctx, lease).Val() == 0
	})
	// Nothing is left running but the abandoned loaders themselves.
	eventually(t, 5*time.Second, "only the stuck loaders remain", func() bool {
		return runtime.NumGoroutine() <= baseline+int(runs.Load())
	})
	// The next call runs the loader again. (A call made as the last flight
	// hands its lease back may still join it, and get its ErrLoadTimeout:
	// it arrived while that load ran.)
	before := runs.Load()
	var v []byte
	var err error
	eventually(t, 5*time.Second, "the next call runs the loader", func() bool {
		v, err = e.c.Fetch(ctx, "{K}", time.Minute, func(context.Context) ([]byte, error) {
			runs.Add(1)
			return []byte("fresh"), nil
		})
		return !errors.Is(err, corral.ErrLoadTimeout)
	})
	if err != nil || string(v) != "fresh" || runs.Load() != before+1 {
		t.Fatalf("next call = %q, %v (loader runs %d -> %d); want the loader to run again", v, err, before, runs.Load())
	}
	close(release) // the abandoned loaders return; their results are dropped
	eventually(t, 5*time.Second, "goroutines return to the baseline", func() bool {
		return runtime.NumGoroutine() <= baseline
	})
	if got, _ := e.c.Get(ctx, "{K}"); string(got) != "fresh" {
		t.Fatalf("an abandoned load overwrote the cache: %q", got)
	}
}

// leaseName returns the Redis name of key's lease, which exists only while
// a load runs, by asking for a key whose tag we can compute: keys with a hash
// tag use it verbatim.
func leaseName(key string) string {
	return "corral:l:{" + key + "}:{" + key + "}"
}

// leaseHeld reports whether the lease of key (its own hash tag, without
// braces) holds a token: a lease handed back with no entry leaves a
// revocation marker instead ("backoff", see release.lua), which no caller
// waits on.
func leaseHeld(t *testing.T, rdb *redis.Client, key string) bool {
	t.Helper()
	v, err := rdb.Get(context.Background(), leaseName(key)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return err == nil && v != "backoff"
}

func TestCase_C02_RenewalOutlivesTheLoad(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"returns", "fails", "paused"} {
		t.Run(variant, func(t *testing.T) {
			const leaseTTL = time.Second
			e := newEnv(t, nil)
			rdb, hook := e.faultyClient()
			c := newCache(t, rdb, &corral.Options{LeaseTTL: leaseTTL, RedisTimeout: 200 * time.Millisecond})
			// A second process, patient enough to ride out the pause.
			other := newCache(t, e.srv.Client(), &corral.Options{LeaseTTL: leaseTTL, RedisTimeout: 2 * time.Second})
			admin := e.srv.Client()
			ctx := context.Background()
			key, lease := "{c02}", leaseName("c02")
			renewSHA := scriptSHA(t, "renew")
			var renewals, sent atomic.Int32
			hook.setAfter(func(cmd redis.Cmder) error { // runs that succeeded (not NOSCRIPT)
				if isScript(cmd, renewSHA) {
					renewals.Add(1)
				}
				return nil
			})
			// Renewals as they are sent: one sent before Fetch returned may
			// be answered after it on a starved machine, which is no
			// renewal after the load.
			hook.setBefore(func(cmd redis.Cmder) error {
				if isScript(cmd, renewSHA) {
					sent.Add(1)
				}
				return nil
			})

			var token string
			var heldAtEnd time.Duration
			load := func(context.Context) ([]byte, error) {
				token = admin.Get(ctx, lease).Val()
				time.Sleep(1300 * time.Millisecond) // the origin: longer than LeaseTTL
				heldAtEnd = admin.PTTL(ctx, lease).Val()
				switch variant {
				case "fails":
					return nil, errors.New("origin down")
				case "paused":
					// Redis stops answering while the lease is released.
					admin.Do(ctx, "CLIENT", "PAUSE", 500)
					return nil, errors.New("origin down")
				}
				return []byte("v"), nil
			}
			_, err := c.Fetch(ctx, key, time.Minute, load)
			returned := time.Now()
			renewedBefore, sentBefore := renewals.Load(), sent.Load()
			if variant == "returns" && err != nil || variant != "returns" && err == nil {
				t.Fatalf("Fetch err = %v", err)
			}
			// Held at the end of a load longer than LeaseTTL: renewed. The
			// watchdog renews every LeaseTTL/3 (three or four times here on
			// a quiet machine); a starved one delays some, which the lease's
			// slack absorbs, so the count is logged, not asserted past one.
			t.Logf("%d renewals during the load", renewedBefore)
			if heldAtEnd <= 0 || renewedBefore < 1 {
				t.Fatalf("a load longer than LeaseTTL kept its lease (PTTL %v) with %d renewals; want it held, renewed", heldAtEnd, renewedBefore)
			}

			// A caller in a second process gets the value or the lease
			// within LeaseTTL plus its backoff (and the pause).
			type result struct {
				v    string
				err  error
				took time.Duration
			}
			done := make(chan result, 1)
			go func() {
				v, err := other.Fetch(ctx, key, time.Minute, value("v2"))
				done <- result{string(v), err, time.Since(returned)}
			}()

			// Once Fetch has returned: no renewal is sent, the lease's PTTL
			// never rises, and the lease is gone within LeaseTTL. Watched
			// for longer than LeaseTTL.
			last := time.Duration(1 << 62)
			var goneAt time.Duration
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for watch := time.Now().Add(leaseTTL + 300*time.Millisecond); time.Now().Before(watch); <-tick.C {
				pipe := admin.Pipeline()
				get, pttl := pipe.Get(ctx, lease), pipe.PTTL(ctx, lease)
				pipe.Exec(ctx)
				if get.Val() != token || token == "" {
					if goneAt == 0 {
						goneAt = time.Since(returned)
					}
					continue
				}
				if goneAt != 0 {
					t.Fatalf("the lease came back %v after it was gone", time.Since(returned))
				}
				if pttl.Val() > last+5*time.Millisecond {
					t.Fatalf("lease PTTL rose after Fetch returned: %v -> %v", last, pttl.Val())
				}
				last = pttl.Val()
			}
			if goneAt == 0 || goneAt > leaseTTL+slack {
				t.Fatalf("lease still held %v after Fetch returned", goneAt)
			}
			if n := sent.Load() - sentBefore; n != 0 {
				t.Fatalf("%d renewals sent after Fetch returned", n)
			}
			want := map[string]string{"returns": "v", "fails": "v2", "paused": "v2"}[variant]
			select {
			case r := <-done:
				if r.err != nil || r.v != want || other.Stats().FailOpens != 0 {
					t.Fatalf("second process: %+v, %+v; want %q through the lease protocol", r, other.Stats(), want)
				}
			case <-time.After(leaseTTL + leaseTTL/4 + time.Second):
				t.Fatal("second process still waiting after LeaseTTL + backoff + 1s")
			}
		})
	}
}

func TestCase_C03_LoaderPanic(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	for _, pv := range []any{"boom", errBoom} {
		t.Run(fmt.Sprintf("panic(%T)", pv), func(t *testing.T) {
			e := newEnv(t, nil)
			rdb, hook := e.faultyClient()
			// The case is about panics, not a slow Redis: a busy machine must
			// not make the holder fail open and leave the lease to the other.
			opts := func() *corral.Options { return &corral.Options{RedisTimeout: 10 * time.Second} }
			c := newCache(t, rdb, opts())
			otherRdb, otherHook := e.faultyClient()
			other := newCache(t, otherRdb, opts()) // a waiter in another process
			ctx := context.Background()
			fetchSHA, releaseSHA := scriptSHA(t, "fetch"), scriptSHA(t, "release")
			var otherFetches atomic.Int32
			otherHook.setAfter(func(cmd redis.Cmder) error {
				if isScript(cmd, fetchSHA) {
					otherFetches.Add(1)
				}
				return nil
			})
			var releases atomic.Int32
			hook.setAfter(func(cmd redis.Cmder) error { // runs that succeeded (not NOSCRIPT)
				if isScript(cmd, releaseSHA) {
					releases.Add(1)
				}
				return nil
			})
			var runs atomic.Int32
			started, gate := make(chan struct{}), make(chan struct{})
			load := func(context.Context) ([]byte, error) {
				if runs.Add(1) == 1 {
					close(started) // fetch.lua answered LOAD: c holds the lease
					<-gate
					panic(pv)
				}
				return []byte("ok"), nil
			}
			var wg sync.WaitGroup
			type result struct {
				err  error
				when time.Time
			}
			results := make(chan result, 10)
			for range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					_, err := c.Fetch(cctx, "{c03}", time.Minute, load)
					results <- result{err, time.Now()}
				}()
			}
			<-started
			eventually(t, 10*time.Second, "all 10 callers joined", func() bool { return c.Stats().Joined == 9 })
			// Only now, with the lease held, can the other process be sure to wait.
			remote := make(chan error, 1)
			go func() {
				_, err := other.Fetch(ctx, "{c03}", time.Minute, value("not me"))
				remote <- err
			}()
			// Subscribed, and past its re-check after subscribing: it waits for
			// the notice. (A waiter whose re-check comes after the failure is
			// the next caller; see the test below.)
			eventually(t, 10*time.Second, "the other process waits for the notice", func() bool { return otherFetches.Load() == 2 })
			waitSubscribed(t, e.rdb, "corral:n:{c03}:{c03}", 1)
			panicked := time.Now()
			close(gate)
			wg.Wait()
			close(results)
			for r := range results {
				var pe *corral.PanicError
				if !errors.As(r.err, &pe) || pe.Value != pv || !strings.Contains(string(pe.Stack), "cases_test.go") {
					t.Fatalf("caller got %v; want a *PanicError with the value and stack", r.err)
				}
				if err, ok := pv.(error); ok && !errors.Is(r.err, err) {
					t.Fatalf("errors.Is(%v, the panic's error) = false", r.err)
				}
				if late := r.when.Sub(panicked); late > prompt {
					t.Fatalf("a caller returned %v after the panic; want promptly (within %v)", late, prompt)
				}
			}
			if err := <-remote; !errors.Is(err, corral.ErrRemoteLoad) || !strings.Contains(err.Error(), "panicked") {
				t.Fatalf("the other process's waiter got %v; want ErrRemoteLoad saying the loader panicked", err)
			}
			// Released by token (release.lua), and nothing stored.
			if releases.Load() != 1 {
				t.Fatalf("release.lua ran %d times, want 1", releases.Load())
			}
			if e.rdb.Exists(ctx, "corral:e:{c03}:{c03}").Val() != 0 || leaseHeld(t, e.rdb, "c03") {
				t.Fatal("after the panic the lease is held, or an entry exists; want neither")
			}
			if st := c.Stats(); st.FailOpens != 0 || st.Loads != 1 {
				t.Fatalf("stats %+v; want 1 load under the lease, no fail-open", st)
			}
			v, err := c.Fetch(ctx, "{c03}", time.Minute, load)
			if err != nil || string(v) != "ok" || runs.Load() != 2 {
				t.Fatalf("call 11 = %q, %v after %d runs", v, err, runs.Load())
			}
		})
	}
	// A failed load is not cached (without ErrorTTL): a waiter in another
	// process whose re-check reaches Redis after the failure released the
	// lease is the next caller, and loads (one process at a time, by the
	// lease). Only waiters listening when the failure is announced get
	// ErrRemoteLoad.
	t.Run("a waiter re-checking after the failure is the next caller", func(t *testing.T) {
		e := newEnv(t, nil)
		opts := func() *corral.Options { return &corral.Options{RedisTimeout: 10 * time.Second} }
		a := newCache(t, e.rdb, opts())
		bRdb, bHook := e.faultyClient()
		b := newCache(t, bRdb, opts())
		ctx := context.Background()
		fetchSHA := scriptSHA(t, "fetch")
		aDone := make(chan struct{})
		var bFetches atomic.Int32
		bHook.setBefore(func(cmd redis.Cmder) error {
			if isScript(cmd, fetchSHA) && bFetches.Add(1) == 2 {
				<-aDone // the re-check after subscribing comes after the failure
			}
			return nil
		})
		started, gate := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(aDone)
			_, err := a.Fetch(ctx, "{c03n}", time.Minute, func(context.Context) ([]byte, error) {
				close(started)
				<-gate
				panic("boom")
			})
			var pe *corral.PanicError
			if !errors.As(err, &pe) {
				t.Errorf("the holder's caller got %v; want its *PanicError", err)
			}
		}()
		<-started
		got := make(chan string, 1)
		var bLoads atomic.Int32
		go func() {
			v, err := b.Fetch(ctx, "{c03n}", time.Minute, slow(0, &bLoads, "from b"))
			got <- fmt.Sprintf("%s %v", v, err)
		}()
		eventually(t, 10*time.Second, "b waits", func() bool { return b.Stats().Waits == 1 })
		close(gate)
		if g := <-got; g != "from b <nil>" || bLoads.Load() != 1 {
			t.Fatalf("b got %q after %d loads; want its own load's value", g, bLoads.Load())
		}
	})
	// A holder that panics after its lease passed to another process (it
	// expired while the holder stalled) answers only its own callers: their
	// error is the panic; waiters elsewhere follow the lease and get the new
	// holder's value, not the panic of a load that no longer held it.
	t.Run("panic after the lease was lost", func(t *testing.T) {
		e := newEnv(t, nil)
		opts := func() *corral.Options { return &corral.Options{RedisTimeout: 10 * time.Second} }
		a, b, w := newCache(t, e.rdb, opts()), newCache(t, e.srv.Client(), opts()), newCache(t, e.srv.Client(), opts())
		ctx := context.Background()
		started, gate := make(chan struct{}), make(chan struct{})
		aErr := make(chan error, 1)
		go func() {
			_, err := a.Fetch(ctx, "{c03l}", time.Minute, func(context.Context) ([]byte, error) {
				close(started)
				<-gate
				panic("late boom")
			})
			aErr <- err
		}()
		<-started
		e.rdb.Del(ctx, leaseName("c03l")) // the lease is gone, as if it expired
		finishB := hold(t, b, "{c03l}", []byte("from b"), nil)
		wGot := make(chan string, 1)
		go func() {
			v, err := w.Fetch(ctx, "{c03l}", time.Minute, value("not me"))
			wGot <- fmt.Sprintf("%s %v", v, err)
		}()
		waitSubscribed(t, e.rdb, "corral:n:{c03l}:{c03l}", 1)
		close(gate)
		var pe *corral.PanicError
		if err := <-aErr; !errors.As(err, &pe) {
			t.Fatalf("the holder's caller got %v; want its *PanicError", err)
		}
		finishB()
		if got := <-wGot; got != "from b <nil>" {
			t.Fatalf("the waiter got %q; want the new holder's value", got)
		}
	})
}

func TestCase_C04_LeaseLeftBehind(t *testing.T) {
	t.Parallel()
	// A real dropped connection: a proxy cuts it when fetch.lua's LOAD reply
	// (the lease granted) passes, so the reply never arrives.
	t.Run("connection drops after the lease is taken, client retries", func(t *testing.T) {
		e := newEnv(t, nil)
		proxy := redistest.StartProxy(t, e.srv.Addr)
		c := newCache(t, redis.NewClient(&redis.Options{Addr: proxy.Addr}), &corral.Options{LeaseTTL: 2 * time.Second})
		ctx := context.Background()
		c.Fetch(ctx, "warm", time.Minute, value("w")) // scripts loaded, connection open
		proxy.CutOnReply([]byte("LOAD"))
		var runs atomic.Int32
		var pttl time.Duration
		load := func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			pttl = e.rdb.PTTL(ctx, leaseName("c04")).Val()
			return []byte("v"), nil
		}
		start := time.Now()
		v, err := c.Fetch(ctx, "{c04}", time.Minute, load)
		// go-redis resent fetch.lua on a new connection; it found the lease
		// holding its own token and loaded, rather than waiting on itself.
		if err != nil || string(v) != "v" || runs.Load() != 1 || time.Since(start) > time.Second {
			t.Fatalf("Fetch = %q, %v after %v, %d loads; want the value at once, 1 load", v, err, time.Since(start), runs.Load())
		}
		if pttl <= 0 || pttl > 2*time.Second {
			t.Fatalf("lease PTTL during the load = %v; want it set with its expiry", pttl)
		}
		if st := c.Stats(); st.Waits != 0 || st.FailOpens != 0 {
			t.Fatalf("stats %+v", st)
		}
		if e.rdb.Exists(ctx, leaseName("c04")).Val() != 0 {
			t.Fatal("lease left behind")
		}
	})
	t.Run("connection drops after the lease is taken, no retries", func(t *testing.T) {
		e := newEnv(t, nil)
		proxy := redistest.StartProxy(t, e.srv.Addr)
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
		c := newCache(t, rdb, &corral.Options{LeaseTTL: 500 * time.Millisecond})
		ctx := context.Background()
		c.Fetch(ctx, "warm", time.Minute, value("w"))
		proxy.CutOnReply([]byte("LOAD"))
		var runs atomic.Int32
		// The lease was taken but its reply lost: Fetch fails open.
		v, err := c.Fetch(ctx, "{c04}", time.Minute, slow(0, &runs, "v"))
		if err != nil || string(v) != "v" || c.Stats().FailOpens != 1 {
			t.Fatalf("fail-open Fetch = %q, %v, %+v", v, err, c.Stats())
		}
		if pttl := e.rdb.PTTL(ctx, leaseName("c04")).Val(); pttl == -1 || pttl > 500*time.Millisecond {
			t.Fatalf("lease PTTL = %v; want it set atomically with an expiry <= LeaseTTL", pttl)
		}
		// The flight commits what it loaded under the lease it may have
		// taken (it had): the lease is gone without waiting for its expiry,
		// and the next call is a hit, with no manual cleanup.
		eventually(t, 5*time.Second, "the fail-open value is committed under the lease", func() bool {
			return e.rdb.Exists(ctx, leaseName("c04")).Val() == 0 && e.rdb.Exists(ctx, "corral:e:{c04}:{c04}").Val() == 1
		})
		v, err = c.Fetch(ctx, "{c04}", time.Minute, slow(0, &runs, "v"))
		if err != nil || string(v) != "v" || runs.Load() != 1 {
			t.Fatalf("next call = %q, %v, loads %d; want a hit", v, err, runs.Load())
		}
	})
	t.Run("the loader returns an error", func(t *testing.T) {
		e := newEnv(t, nil)
		ctx := context.Background()
		if _, err := e.c.Fetch(ctx, "{c04b}", time.Minute, func(context.Context) ([]byte, error) {
			return nil, errors.New("db down")
		}); err == nil {
			t.Fatal("want the loader's error")
		}
		// Handed back by compare-and-delete before Fetch returned.
		if leaseHeld(t, e.rdb, "c04b") {
			t.Fatal("lease left behind after a failed load")
		}
		v, err := e.c.Fetch(ctx, "{c04b}", time.Minute, value("v"))
		if err != nil || string(v) != "v" {
			t.Fatalf("next call = %q, %v", v, err)
		}
	})
}

func TestCase_C05_LostLeaseDuringLoad(t *testing.T) {
	t.Parallel()
	opts := func() *corral.Options {
		return &corral.Options{LeaseTTL: time.Second, RedisTimeout: 200 * time.Millisecond}
	}
	t.Run("a renewal times out", func(t *testing.T) {
		e := newEnv(t, nil)
		rdb, f := e.faultyClient()
		c := newCache(t, rdb, opts())
		renewSHA := scriptSHA(t, "renew")
		var failed atomic.Bool
		f.setBefore(func(cmd redis.Cmder) error {
			if isScript(cmd, renewSHA) && failed.CompareAndSwap(false, true) {
				time.Sleep(70 * time.Millisecond) // the first renewal (at ~0.33s) times out at ~0.4s
				return context.DeadlineExceeded
			}
			return nil
		})
		var runs atomic.Int32
		v, err := c.Fetch(context.Background(), "{c05a}", time.Minute, slow(3*time.Second, &runs, "v1"))
		if err != nil || string(v) != "v1" {
			t.Fatalf("Fetch = %q, %v", v, err)
		}
		st := c.Stats()
		if !failed.Load() || st.RedisErrors == 0 || st.LeasesLost != 0 || st.CommitsRejected != 0 || runs.Load() != 1 {
			t.Fatalf("stats %+v, loads %d; want one failed renewal, the next one succeeding, 1 load", st, runs.Load())
		}
		// The commit follows the callers' answer (and a Get may meet the
		// 200 ms RedisTimeout on a starved machine): it lands, soon.
		eventually(t, 5*time.Second, "the cache to hold v1", func() bool {
			got, err := c.Get(context.Background(), "{c05a}")
			return err == nil && string(got) == "v1"
		})
	})
	t.Run("the lease is deleted and taken over", func(t *testing.T) {
		e := newEnv(t, opts())
		// Process 1's renewals after the deletion wait until process 2 has
		// taken the lease and committed: otherwise a renewal could come
		// first, find the lease missing over an unchanged entry, and take
		// it back as an evicted one (which is right, but not this case).
		rdb1, f1 := e.faultyClient()
		p1 := newCache(t, rdb1, opts())
		renewSHA := scriptSHA(t, "renew")
		var deleted atomic.Bool
		p2Done := make(chan struct{})
		f1.setBefore(func(cmd redis.Cmder) error {
			if isScript(cmd, renewSHA) && deleted.Load() {
				<-p2Done
			}
			return nil
		})
		p2 := newCache(t, e.srv.Client(), opts())
		ctx := context.Background()
		key := "{c05b}"
		started := make(chan struct{})
		got1 := make(chan string, 1)
		go func() {
			v, err := p1.Fetch(ctx, key, time.Minute, func(ctx context.Context) ([]byte, error) {
				close(started)
				return slow(3*time.Second, nil, "v1")(ctx)
			})
			if err != nil {
				t.Errorf("process 1: %v", err)
			}
			got1 <- string(v)
		}()
		<-started
		time.Sleep(500 * time.Millisecond) // the case's timeline: the lease is deleted by hand at 0.5s
		deleted.Store(true)
		e.rdb.Del(ctx, leaseName("c05b"))
		v2, err := p2.Fetch(ctx, key, time.Minute, value("v2"))
		close(p2Done)
		if err != nil || string(v2) != "v2" {
			t.Fatalf("process 2 = %q, %v", v2, err)
		}
		eventually(t, 2*time.Second, "process 1 learns its lease is lost", func() bool { return p1.Stats().LeasesLost == 1 })
		if v := <-got1; v != "v1" {
			t.Fatalf("process 1's callers got %q, want its own load's v1", v)
		}
		if st := p1.Stats(); st.CommitsRejected != 1 || st.LeasesLost != 1 {
			t.Fatalf("process 1 stats %+v; want 1 lost lease, 1 rejected commit", st)
		}
		if got, _ := p1.Get(ctx, key); string(got) != "v2" {
			t.Fatalf("cache holds %q, want v2", got)
		}
	})
}

func TestCase_C07_FirstCallerCancels(t *testing.T) {
	t.Parallel()
	logs := &testkit.Buffer{}
	e := newEnv(t, &corral.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := context.Background()
	var runs atomic.Int32
	// The case's 200ms load, ended by the test once D has joined, so a busy
	// machine cannot end it before D arrives.
	gate := make(chan struct{})
	load := func(context.Context) ([]byte, error) {
		runs.Add(1)
		<-gate
		return []byte("v"), nil
	}
	start := time.Now()
	call := func(deadline time.Duration) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		v, err := e.c.Fetch(cctx, "{c07}", time.Minute, load)
		return string(v), err
	}
	type res struct {
		v   string
		err error
	}
	a, b, c, d := make(chan res, 1), make(chan res, 1), make(chan res, 1), make(chan res, 1)
	go func() { v, err := call(50 * time.Millisecond); a <- res{v, err} }()
	eventually(t, 3*time.Second, "A started the load", func() bool { return runs.Load() == 1 })
	go func() { v, err := call(5 * time.Second); b <- res{v, err} }()
	go func() { v, err := call(5 * time.Second); c <- res{v, err} }()
	ra := <-a
	if took := time.Since(start); !errors.Is(ra.err, context.DeadlineExceeded) || took > 50*time.Millisecond+slack {
		t.Fatalf("A = %+v after %v, want DeadlineExceeded at its 50ms deadline", ra, took)
	}
	go func() { v, err := call(5 * time.Second); d <- res{v, err} }() // D arrives after A left
	// On a starved machine Redis may not answer A's read before A's
	// rescue point: A is rescued (its load runs directly, fail-open), and
	// B's flight takes that load's value under its lease, which C and D
	// join (so 2 calls joined, not 3). The load still runs once.
	rescued := strings.Contains(logs.String(), "calling the loader directly")
	joiners := uint64(3)
	if rescued {
		joiners = 2
		t.Log("A was rescued: Redis did not answer its read before its rescue point")
	}
	eventually(t, 5*time.Second, "B, C and D joined A's flight (or B's, A rescued)", func() bool { return e.c.Stats().Joined == joiners })
	close(gate)
	for name, ch := range map[string]chan res{"B": b, "C": c, "D": d} {
		if r := <-ch; r.err != nil || r.v != "v" {
			t.Fatalf("%s = %+v, want the value", name, r)
		}
	}
	// Rescued, B's flight may also be answered by A's fail-open load
	// (coalesced) rather than commit it under its lease: 2 or 3.
	if co := e.c.Stats().Coalesced; runs.Load() != 1 || co < joiners || co > 3 {
		t.Fatalf("loader ran %d times, %d calls answered by another's load; want 1 and %d (B, C, D; or C and D, A rescued, and B)", runs.Load(), co, joiners)
	}
	h := e.rdb.HGetAll(ctx, "corral:e:{c07}:{c07}").Val()
	if h["v"] != "v" || h["f"] != "" {
		t.Fatalf("entry = %v; want the value, not an error or negative entry", h)
	}
}

func TestCase_C08_WaitersMustNotStorm(t *testing.T) {
	t.Parallel()
	const processes, perProcess = 5, 100
	for _, tc := range []struct {
		name    string
		holdFor time.Duration // how long the other process's load takes
		want    error         // nil: every waiter gets the value
	}{
		{"lease held past the deadline", 5 * time.Second, context.DeadlineExceeded},
		{"notice wakes the waiters", time.Second, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, &corral.Options{LeaseTTL: 6 * time.Second})
			ctx := context.Background()
			key := "{c08}"
			holding := make(chan struct{})
			holderDone := make(chan struct{})
			go func() { // the holder: another process
				defer close(holderDone)
				e.c.Fetch(ctx, key, time.Minute, func(ctx context.Context) ([]byte, error) {
					close(holding)
					return slow(tc.holdFor, nil, "v")(ctx)
				})
			}()
			<-holding

			type proc struct {
				c *corral.Cache
				f *faults
			}
			procs := make([]proc, processes)
			for i := range procs {
				rdb, f := e.faultyClient()
				procs[i] = proc{newCache(t, rdb, &corral.Options{LeaseTTL: 6 * time.Second}), f}
			}
			var wg sync.WaitGroup
			var bad atomic.Int32
			for _, p := range procs {
				for range perProcess {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
						defer cancel()
						start := time.Now()
						v, err := p.c.Fetch(cctx, key, time.Minute, value("not me"))
						took := time.Since(start)
						// 500 goroutines under -race: a wider scheduling margin.
						ok := errors.Is(err, tc.want) && took <= 2*time.Second+2*slack
						if tc.want == nil {
							ok = err == nil && string(v) == "v" && took <= tc.holdFor+2*slack
						}
						if !ok && bad.Add(1) <= 3 {
							t.Errorf("waiter: %q, %v after %v", v, err, took)
						}
					}()
				}
			}
			wg.Wait()
			commands := func() (n int64) {
				for _, p := range procs {
					st := p.c.Stats()
					n += p.f.commands.Load() + int64(st.Subscribes+st.Unsubscribes)
				}
				return n
			}
			// The last waiter's departure ends the process's flight, whose
			// channel lingers a second (internal/notify), then is
			// unsubscribed (its one clean-up command, counted below).
			eventually(t, 5*time.Second, "every process unsubscribed", func() bool {
				for _, p := range procs {
					if p.c.Stats().Unsubscribes != 1 {
						return false
					}
				}
				return true
			})
			total := commands()

			// Per process: the peek (TIME and HMGET), fetch, the one-time
			// start-up script (pub/sub mode, rights, eviction policy),
			// subscribe, fetch again, unsubscribe (7); a
			// notice, not a poll, ends the wait. The bound leaves room for a
			// few re-checks on a busy machine (a subscription confirmed
			// after 250 ms) and stays far below one command per waiter.
			if bound := 20 * processes; total > int64(bound) {
				t.Fatalf("%d waiters in %d processes sent %d Redis commands; want O(processes) (<= %d)",
					processes*perProcess, processes, total, bound)
			}
			// No command is sent for a waiter after its context ended.
			<-time.After(300 * time.Millisecond) // an observation window, not synchronisation
			if after := commands(); after != total {
				t.Fatalf("%d commands sent after every waiter had returned", after-total)
			}
			t.Logf("%d waiters, %d processes: %d Redis commands", processes*perProcess, processes, total)
			<-holderDone
		})
	}
}

func TestCase_C09_ErrorsReachEveryJoinedCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	errE := errors.New("E: origin failed")
	var runs atomic.Int32
	failing := func(ctx context.Context) ([]byte, error) {
		runs.Add(1)
		<-time.After(100 * time.Millisecond)
		return nil, errE
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := e.c.Fetch(ctx, "{c09}", time.Minute, failing)
			if !errors.Is(err, errE) || v != nil {
				t.Errorf("caller got %q, %v; want nil and E", v, err)
			}
		}()
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("loader ran %d times for 5 joined callers", runs.Load())
	}
	if e.rdb.Exists(ctx, "corral:e:{c09}:{c09}").Val() != 0 || leaseHeld(t, e.rdb, "c09") {
		t.Fatal("a failed load left an entry or lease")
	}
	v, err := e.c.Fetch(ctx, "{c09}", time.Minute, slow(0, &runs, "v"))
	if err != nil || string(v) != "v" || runs.Load() != 2 {
		t.Fatalf("call 6 = %q, %v", v, err)
	}
}

func TestCase_C11_NotFoundVersusEmpty(t *testing.T) {
	t.Parallel()
	const negTTL = time.Second
	e := newEnv(t, &corral.Options{NegativeTTL: negTTL})
	ctx := context.Background()
	var loads999, loads1 atomic.Int32
	load999 := func(context.Context) ([]byte, error) {
		loads999.Add(1)
		return nil, corral.ErrNotFound
	}
	load1 := func(context.Context) ([]byte, error) {
		loads1.Add(1)
		return []byte{}, nil
	}
	for i := range 5 {
		v, err := e.c.Fetch(ctx, "item:999", time.Minute, load999)
		if !errors.Is(err, corral.ErrNotFound) || v != nil {
			t.Fatalf("999 call %d = %q, %v; want ErrNotFound", i, v, err)
		}
		v, err = e.c.Fetch(ctx, "item:1", time.Minute, load1)
		if err != nil || v == nil || len(v) != 0 {
			t.Fatalf("1 call %d = %q (nil %v), %v; want an empty, non-nil value", i, v, v == nil, err)
		}
	}
	if loads999.Load() != 1 || loads1.Load() != 1 {
		t.Fatalf("loads inside NegativeTTL: 999 %d, 1 %d; want 1 each", loads999.Load(), loads1.Load())
	}
	if st := e.c.Stats(); st.NegativeHits != 4 || st.Hits != 4 {
		t.Fatalf("stats %+v; want 4 negative hits and 4 hits", st)
	}
	eventually(t, 2*negTTL, "the negative entry expires", func() bool {
		_, err := e.c.Get(ctx, "item:999")
		return errors.Is(err, corral.ErrMiss)
	})
	if _, err := e.c.Fetch(ctx, "item:999", time.Minute, load999); !errors.Is(err, corral.ErrNotFound) || loads999.Load() != 2 {
		t.Fatalf("after NegativeTTL: %v, loads %d; want a 2nd load", err, loads999.Load())
	}
	if _, err := e.c.Fetch(ctx, "item:1", time.Minute, load1); err != nil || loads1.Load() != 1 {
		t.Fatalf("item:1 reloaded (%d loads): an empty value must stay a hit", loads1.Load())
	}

	// Concurrent callers, here and in another process waiting on the lease,
	// all get ErrNotFound from one load.
	other := newCache(t, e.srv.Client(), &corral.Options{NegativeTTL: negTTL})
	gate := make(chan struct{})
	var loads atomic.Int32
	gated := func(context.Context) ([]byte, error) {
		loads.Add(1)
		<-gate
		return nil, fmt.Errorf("item 998: %w", corral.ErrNotFound)
	}
	var wg sync.WaitGroup
	for i := range 6 {
		c := e.c
		if i%2 == 1 {
			c = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.Fetch(ctx, "{item:998}", time.Minute, gated)
			if !errors.Is(err, corral.ErrNotFound) || v != nil {
				t.Errorf("concurrent caller = %q, %v; want ErrNotFound", v, err)
			}
		}()
	}
	waitSubscribed(t, e.rdb, "corral:n:{item:998}:{item:998}", 1)
	close(gate)
	wg.Wait()
	if loads.Load() != 1 {
		t.Fatalf("%d loads for 6 concurrent callers in 2 processes", loads.Load())
	}
}
