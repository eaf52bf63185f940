package corral_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

// A Fetch and a FetchMany of the same key in one process share one load,
// whichever starts it.
func TestFetchMany_SharesLoadsWithFetch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()

	t.Run("Fetch first", func(t *testing.T) {
		finish := hold(t, e.c, "share:a0", []byte("v:share:a0"), nil)
		before := e.c.Stats().Coalesced
		var o batchOrigin
		done := make(chan error, 1)
		var vals map[string][]byte
		go func() {
			var err error
			vals, err = e.c.FetchMany(ctx, []string{"share:a0", "share:a1"}, time.Minute, o.load)
			done <- err
		}()
		if calls := o.waitCalls(t, 1); !slices.Equal(calls[0], sorted("share:a1")) {
			t.Fatalf("loadMany calls %v; want only the key no flight was loading", calls)
		}
		finish()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		wantValues(t, vals, []string{"share:a0", "share:a1"})
		if n := e.c.Stats().Coalesced - before; n != 1 || len(o.called()) != 1 {
			t.Fatalf("%d calls joined a flight, loadMany calls %v", n, o.called())
		}
	})

	t.Run("FetchMany first", func(t *testing.T) {
		o := batchOrigin{gate: make(chan struct{})}
		done := make(chan error, 1)
		go func() {
			_, err := e.c.FetchMany(ctx, []string{"share:b0", "share:b1"}, time.Minute, o.load)
			done <- err
		}()
		o.waitCalls(t, 1)
		before := e.c.Stats().Joined
		var runs atomic.Int32
		got := make(chan string, 1)
		go func() {
			v, _ := e.c.Fetch(ctx, "share:b1", time.Minute, slow(0, &runs, "fetch's own"))
			got <- string(v)
		}()
		eventually(t, 5*time.Second, "Fetch joins the batch's flight", func() bool { return e.c.Stats().Joined > before })
		close(o.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if v := <-got; v != "v:share:b1" || runs.Load() != 0 || len(o.called()) != 1 {
			t.Fatalf("Fetch got %q after %d loads of its own, loadMany calls %v; want the batch's value", v, runs.Load(), o.called())
		}
	})
}

// Stale entries are served stale at once (stale-while-revalidate), and
// refreshed in the background by one loadMany call for all of them.
func TestFetchMany_StaleServedWhileOneCallRefreshes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{StaleTTL: time.Minute, DisableJitter: true, DisableEarlyRefresh: true})
	ctx := context.Background()
	keys := []string{"{swr}:0", "{swr}:1", "{swr}:2", "{swr}:3", "{swr}:4"}
	var first batchOrigin
	if _, err := e.c.FetchMany(ctx, keys, 100*time.Millisecond, first.load); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		waitStale(t, e.rdb, "corral:e:{swr}:"+k)
	}
	refresh := batchOrigin{tag: "+new", gate: make(chan struct{})}
	vals, err := e.c.FetchMany(ctx, keys, time.Minute, refresh.load)
	if err != nil {
		t.Fatal(err)
	}
	wantValues(t, vals, keys) // the stale values, while the refresh waits at its gate
	if calls := refresh.waitCalls(t, 1); !slices.Equal(calls[0], sorted(keys...)) {
		t.Fatalf("refresh calls %v; want one with every stale key", calls)
	}
	close(refresh.gate)
	eventually(t, 5*time.Second, "the refreshes are stored", func() bool {
		vals, err := e.c.FetchMany(ctx, keys, time.Minute, refresh.load)
		for _, k := range keys {
			if string(vals[k]) != "v:"+k+"+new" {
				return false
			}
		}
		return err == nil
	})
	if st := e.c.Stats(); len(refresh.called()) != 1 || st.StaleHits < 5 || st.Refreshes != 5 {
		t.Fatalf("refresh calls %v, stats %+v; want one call, 5 stale hits and 5 refreshes", refresh.called(), st)
	}
}

// A caller whose context ends gets ctx.Err() for the keys still loading;
// the load carries on, detached, and its values are stored.
func TestFetchMany_CallerLeavesTheLoadGoesOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	keys := keyRange("leave:", 0, 5)
	if err := e.c.Set(context.Background(), keys[0], []byte("v:"+keys[0]), time.Minute); err != nil {
		t.Fatal(err)
	}
	o := batchOrigin{gate: make(chan struct{})}
	// The load waits at its gate past any deadline; the hit needs its round
	// trips within it (a first pipeline dials its connection: slow on a
	// loaded machine, as a fresh-clone make test found with 100 ms).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	vals, err := e.c.FetchMany(ctx, keys, time.Minute, o.load)
	var be *corral.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 4 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FetchMany past its deadline: %v", err)
	}
	wantValues(t, vals, keys[:1]) // the hit is answered
	close(o.gate)
	eventually(t, 5*time.Second, "the detached load is stored", func() bool {
		v, err := e.c.Get(context.Background(), keys[4])
		return err == nil && string(v) == "v:"+keys[4]
	})
}

// Close during loadMany: its context is cancelled, each key fails with
// ErrClosed, and nothing is left running (TestMain checks for leaks).
func TestFetchMany_Close(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	o := batchOrigin{gate: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := e.c.FetchMany(context.Background(), keyRange("close:", 0, 3), time.Minute, o.load)
		done <- err
	}()
	o.waitCalls(t, 1)
	e.c.Close()
	err := <-done
	var be *corral.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 {
		t.Fatalf("FetchMany during Close = %v", err)
	}
	for k, err := range be.Errs {
		if !errors.Is(err, corral.ErrClosed) {
			t.Fatalf("%q: %v, want ErrClosed", k, err)
		}
	}
	if _, err := e.c.FetchMany(context.Background(), []string{"x"}, time.Minute, o.load); !errors.Is(err, corral.ErrClosed) {
		t.Fatalf("FetchMany after Close = %v", err)
	}
}

// With the near cache on, FetchMany keeps and serves copies as Fetch does:
// values and "not found" alike, and decoded values per type for the typed
// form.
func TestFetchMany_NearCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{NearCache: corral.NearCacheOptions{Size: 100, TTL: time.Minute}})
	ctx := context.Background()
	keys := keyRange("near:", 0, 10)
	o := batchOrigin{absent: map[string]bool{"near:9": true}}
	eventually(t, 5*time.Second, "every key from the near cache", func() bool {
		before := e.c.Stats().NearHits
		vals, err := e.c.FetchMany(ctx, keys, time.Minute, o.load)
		if err != nil || len(vals) != 9 || string(vals["near:8"]) != "v:near:8" {
			t.Fatalf("FetchMany = %q, %v", vals, err)
		}
		return e.c.Stats().NearHits-before == 10
	})
	if calls := o.called(); len(calls) != 1 {
		t.Fatalf("loadMany calls %v; want 1", calls)
	}

	typed := keyRange("near:typed:", 0, 3)
	load := func(ctx context.Context, missing []string) (map[string]string, error) {
		vals := map[string]string{}
		for _, k := range missing {
			vals[k] = "t:" + k
		}
		return vals, nil
	}
	eventually(t, 5*time.Second, "every typed key from the near cache", func() bool {
		before := e.c.Stats().NearHits
		vals, err := corral.FetchMany(ctx, e.c, typed, time.Minute, load)
		if err != nil || len(vals) != 3 || vals["near:typed:2"] != "t:near:typed:2" {
			t.Fatalf("FetchMany[string] = %q, %v", vals, err)
		}
		return e.c.Stats().NearHits-before == 3
	})
}

// A loadMany still running at LoadTimeout fails each of its keys with
// ErrLoadTimeout; their leases go back, so the next call loads them.
func TestFetchMany_LoadTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{LoadTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	keys := keyRange("timeout:", 0, 3)
	stuck := batchOrigin{gate: make(chan struct{})} // never opened: waits for its context
	_, err := e.c.FetchMany(ctx, keys, time.Minute, stuck.load)
	var be *corral.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 {
		t.Fatalf("FetchMany = %v", err)
	}
	for k, err := range be.Errs {
		if !errors.Is(err, corral.ErrLoadTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%q: %v; want ErrLoadTimeout", k, err)
		}
	}
	var o batchOrigin
	vals, err := e.c.FetchMany(ctx, keys, time.Minute, o.load)
	if err != nil || len(o.called()) != 1 {
		t.Fatalf("after the timeout: %v, loadMany calls %v", err, o.called())
	}
	wantValues(t, vals, keys)
}
