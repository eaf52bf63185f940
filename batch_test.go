package corral_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

// batchOrigin is a loadMany that records its calls: it returns "v:"+key+tag
// for each key it is asked for, but those in absent.
type batchOrigin struct {
	mu     sync.Mutex
	calls  [][]string
	tag    string
	absent map[string]bool
	err    error         // returned by every call, when set
	panics bool          // every call panics
	gate   chan struct{} // when set, each call waits for it to close
}

func (o *batchOrigin) load(ctx context.Context, keys []string) (map[string][]byte, error) {
	o.mu.Lock()
	o.calls = append(o.calls, slices.Clone(keys))
	gate, err := o.gate, o.err
	o.mu.Unlock()
	if o.panics {
		panic("origin exploded")
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	vals := map[string][]byte{}
	for _, k := range keys {
		if !o.absent[k] {
			vals[k] = []byte("v:" + k + o.tag)
		}
	}
	return vals, nil
}

// called returns the calls so far, each call's keys sorted.
func (o *batchOrigin) called() [][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	calls := make([][]string, len(o.calls))
	for i, c := range o.calls {
		calls[i] = slices.Sorted(slices.Values(c))
	}
	return calls
}

// keyRange returns prefix+i for i in [from, to).
func keyRange(prefix string, from, to int) []string {
	keys := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		keys = append(keys, prefix+strconv.Itoa(i))
	}
	return keys
}

// waitCalls waits until o was called n times, and returns its calls.
func (o *batchOrigin) waitCalls(t *testing.T, n int) [][]string {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%d loadMany calls", n), func() bool { return len(o.called()) >= n })
	return o.called()
}

// wantValues fails t unless vals holds exactly "v:"+key for each of keys.
func wantValues(t *testing.T, vals map[string][]byte, keys []string) {
	t.Helper()
	wantTagged(t, vals, keys, "")
}

// wantTagged fails t unless vals holds exactly "v:"+key+tag for each of keys.
func wantTagged(t *testing.T, vals map[string][]byte, keys []string, tag string) {
	t.Helper()
	if len(vals) != len(keys) {
		t.Fatalf("%d values, want %d: %q", len(vals), len(keys), vals)
	}
	for _, k := range keys {
		if v, ok := vals[k]; !ok || string(v) != "v:"+k+tag {
			t.Fatalf("value of %q = %q (present %v), want %q", k, v, ok, "v:"+k+tag)
		}
	}
}

// sorted returns keys sorted, as called reports them.
func sorted(keys ...string) []string { return slices.Sorted(slices.Values(keys)) }

// Some keys cached, some not: one loadMany call with exactly the missing
// ones, every value returned; a second call is all hits.
func TestFetchMany_HitsAndMisses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	keys := keyRange("mix:", 0, 50)
	for _, k := range keys[:20] {
		if err := e.c.Set(ctx, k, []byte("v:"+k), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var o batchOrigin
	vals, err := e.c.FetchMany(ctx, keys, time.Minute, o.load)
	if err != nil {
		t.Fatal(err)
	}
	wantValues(t, vals, keys)
	calls := o.called()
	if want := slices.Sorted(slices.Values(keys[20:])); len(calls) != 1 || !slices.Equal(calls[0], want) {
		t.Fatalf("loadMany calls %v, want one with the 30 missing keys", calls)
	}
	if st := e.c.Stats(); st.Hits != 20 || st.Misses != 30 || st.Loads != 30 {
		t.Fatalf("stats after the first call: %+v", st)
	}
	vals, err = e.c.FetchMany(ctx, keys, time.Minute, o.load)
	if err != nil || len(o.called()) != 1 {
		t.Fatalf("second call: %v, %d loadMany calls", err, len(o.called()))
	}
	wantValues(t, vals, keys)
	for _, k := range []string{keys[0], keys[49]} {
		if v, err := e.c.Get(ctx, k); err != nil || string(v) != "v:"+k {
			t.Fatalf("Get(%q) = %q, %v", k, v, err)
		}
	}
}

// Keys missing from loadMany's answer are cached as negative entries: absent
// from the result, not an error, and not loaded again while NegativeTTL
// lasts; Fetch of one returns ErrNotFound.
func TestFetchMany_NotFoundIsCachedNegatively(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{NegativeTTL: time.Minute})
	ctx := context.Background()
	keys := keyRange("nf:", 0, 10)
	o := batchOrigin{absent: map[string]bool{"nf:3": true, "nf:7": true}}
	found := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return o.absent[k] })
	for range 2 {
		vals, err := e.c.FetchMany(ctx, keys, time.Minute, o.load)
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, vals, found)
	}
	if calls := o.called(); len(calls) != 1 {
		t.Fatalf("loadMany calls %v; want 1: the negative entries answer the second call", calls)
	}
	if st := e.c.Stats(); st.NegativeHits != 2 || st.Hits != 8 {
		t.Fatalf("stats %+v; want 2 negative hits and 8 hits on the second call", st)
	}
	if _, err := e.c.Fetch(ctx, "nf:3", time.Minute, value("x")); !errors.Is(err, corral.ErrNotFound) {
		t.Fatalf("Fetch of a key loadMany did not return = %v, want ErrNotFound", err)
	}
}

// A failed loadMany fails each of its keys with its error, which is not
// cached; a panic is a *PanicError for each.
func TestFetchMany_LoadErrorFailsEachKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	keys := keyRange("fail:", 0, 20)
	boom := errors.New("origin down")
	failing := batchOrigin{err: boom}
	vals, err := e.c.FetchMany(ctx, keys, time.Minute, failing.load)
	var be *corral.BatchError
	if !errors.As(err, &be) || len(be.Errs) != len(keys) || len(vals) != 0 || !errors.Is(err, boom) {
		t.Fatalf("FetchMany = %d values, %v; want a *BatchError with all %d keys", len(vals), err, len(keys))
	}
	for _, k := range keys {
		if !errors.Is(be.Errs[k], boom) {
			t.Fatalf("error of %q = %v, want the origin's", k, be.Errs[k])
		}
	}
	if !strings.HasPrefix(err.Error(), "corral: 20 of the keys failed; \"fail:0\": origin down;") {
		t.Fatalf("error text %q", err)
	}
	if _, err := e.c.Get(ctx, keys[0]); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("after the failure Get = %v; want ErrMiss (failures are not cached)", err)
	}
	var o batchOrigin
	vals, err = e.c.FetchMany(ctx, keys, time.Minute, o.load)
	if err != nil || len(o.called()) != 1 {
		t.Fatalf("after the failure: %v, loadMany calls %v", err, o.called())
	}
	wantValues(t, vals, keys)

	panicking := batchOrigin{panics: true}
	_, err = e.c.FetchMany(ctx, keyRange("panic:", 0, 5), time.Minute, panicking.load)
	if !errors.As(err, &be) || len(be.Errs) != 5 {
		t.Fatalf("panicking loadMany: %v", err)
	}
	for k, err := range be.Errs {
		var pe *corral.PanicError
		if !errors.As(err, &pe) || pe.Value != "origin exploded" || !strings.Contains(string(pe.Stack), "batch_test.go") {
			t.Fatalf("error of %q = %v; want a *PanicError with the origin's stack", k, err)
		}
	}
}

// A key whose lease another process holds is waited for, not loaded: this
// process's loadMany gets only the keys it won, at once, and the waiting key
// gets the other process's value when it commits.
func TestFetchMany_WaitsForKeysOthersHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	other := newCache(t, e.srv.Client(), nil) // another process
	ctx := context.Background()
	finish := hold(t, other, "held:0", []byte("v:held:0"), nil)
	var o batchOrigin
	o.tag = "!" // the held key's value must come from the other process
	type result struct {
		vals map[string][]byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		vals, err := e.c.FetchMany(ctx, []string{"held:0", "held:1", "held:2"}, time.Minute, o.load)
		done <- result{vals, err}
	}()
	if calls := o.waitCalls(t, 1); !slices.Equal(calls[0], sorted("held:1", "held:2")) {
		t.Fatalf("loadMany calls %v; want one with the keys this process won", calls)
	}
	finish()
	r := <-done
	if r.err != nil || string(r.vals["held:0"]) != "v:held:0" || string(r.vals["held:1"]) != "v:held:1!" || len(r.vals) != 3 {
		t.Fatalf("FetchMany = %q, %v", r.vals, r.err)
	}
	if calls := o.called(); len(calls) != 1 || e.c.Stats().Waits != 1 {
		t.Fatalf("loadMany calls %v, stats %+v", calls, e.c.Stats())
	}
}

// A lease this process takes over after its holder gave it up (its process
// closed mid-load) makes one more loadMany call, with that key alone.
func TestFetchMany_TakeoverAddsACall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	other, err := corral.New(e.srv.Client(), &corral.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	hold(t, other, "take:0", nil, nil)
	var o batchOrigin
	done := make(chan error, 1)
	var vals map[string][]byte
	go func() {
		var err error
		vals, err = e.c.FetchMany(ctx, []string{"take:0", "take:1"}, time.Minute, o.load)
		done <- err
	}()
	o.waitCalls(t, 1)
	other.Close() // hands the lease back: the waiter takes it over
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantValues(t, vals, []string{"take:0", "take:1"})
	if calls := o.called(); len(calls) != 2 || !slices.Equal(calls[0], sorted("take:1")) || !slices.Equal(calls[1], sorted("take:0")) {
		t.Fatalf("loadMany calls %v; want [take:1] then [take:0]", calls)
	}
}

// Each key's lease is renewed while loadMany runs, however long it takes:
// another process asking for a key meanwhile waits, and never loads it.
func TestFetchMany_LeasesRenewedWhileLoading(t *testing.T) {
	t.Parallel()
	const leaseTTL = 600 * time.Millisecond
	opts := func() *corral.Options { return &corral.Options{LeaseTTL: leaseTTL} }
	e := newEnv(t, opts())
	other := newCache(t, e.srv.Client(), opts())
	ctx := context.Background()
	keys := []string{"{ren}:0", "{ren}:1", "{ren}:2"}
	o := batchOrigin{gate: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := e.c.FetchMany(ctx, keys, time.Minute, o.load)
		done <- err
	}()
	o.waitCalls(t, 1)
	// Watch the leases for 2.5 LeaseTTLs: each is there throughout.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for start := time.Now(); time.Since(start) < 5*leaseTTL/2; <-tick.C {
		for _, k := range keys {
			if n, err := e.rdb.Exists(ctx, "corral:l:{ren}:"+k).Result(); err != nil || n != 1 {
				t.Fatalf("lease of %q gone %v into the load (%v)", k, time.Since(start), err)
			}
		}
	}
	var runs atomic.Int32
	got := make(chan string, 1)
	go func() {
		v, err := other.Fetch(ctx, keys[1], time.Minute, slow(0, &runs, "other"))
		got <- fmt.Sprintf("%s %v", v, err)
	}()
	eventually(t, 5*time.Second, "the other process waits", func() bool { return other.Stats().Waits == 1 || len(got) > 0 })
	if len(got) > 0 {
		t.Fatalf("the other process got %q during the batch's load (stats %+v); want it to wait", <-got, other.Stats())
	}
	close(o.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "v:{ren}:1 <nil>" || runs.Load() != 0 {
		t.Fatalf("the other process got %q after %d loads of its own; want the batch's value", v, runs.Load())
	}
}
