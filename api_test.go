package corral_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
)

func TestNewRejectsNonsense(t *testing.T) {
	t.Parallel()
	if _, err := corral.New(nil, nil); !errors.Is(err, corral.ErrInvalidOptions) {
		t.Fatalf("New(nil) = %v", err)
	}
	rdb := redistest.Start(t).Client()
	for name, o := range map[string]corral.Options{
		"prefix with {":   {Prefix: "app{1}"},
		"prefix with }":   {Prefix: "a}"},
		"negative lease":  {LeaseTTL: -time.Second},
		"tiny lease":      {LeaseTTL: time.Millisecond},
		"negative load":   {LoadTimeout: -1},
		"negative stale":  {StaleTTL: -1},
		"negative redis":  {RedisTimeout: -1},
		"negative neg":    {NegativeTTL: -1},
		"jitter 1":        {Jitter: 1},
		"negative jitter": {Jitter: -0.1},
		"NaN beta":        {Beta: math.NaN()},
		"negative beta":   {Beta: -1},
		"negative inline": {NoticeInlineLimit: -1},
		"negative bg":     {MaxBackgroundRefreshes: -1},
	} {
		if _, err := corral.New(rdb, &o); !errors.Is(err, corral.ErrInvalidOptions) {
			t.Errorf("%s: New = %v, want ErrInvalidOptions", name, err)
		}
	}
	c, err := corral.New(rdb, nil)
	if err != nil {
		t.Fatalf("New(rdb, nil) = %v", err)
	}
	c.Close()
}

func TestBadInputLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	if err := e.c.Set(ctx, "k", []byte("keep"), time.Minute); err != nil {
		t.Fatal(err)
	}
	load := value("v")
	for name, err := range map[string]error{
		"empty key Fetch":  second(e.c.Fetch(ctx, "", time.Minute, load)),
		"empty key Get":    second(e.c.Get(ctx, "")),
		"empty key Set":    e.c.Set(ctx, "", []byte("x"), time.Minute),
		"empty key Delete": e.c.Delete(ctx, ""),
	} {
		if !errors.Is(err, corral.ErrInvalidKey) {
			t.Errorf("%s = %v, want ErrInvalidKey", name, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := e.c.Fetch(ctx, "k", ttl, load); !errors.Is(err, corral.ErrInvalidTTL) {
			t.Errorf("Fetch ttl %v = %v, want ErrInvalidTTL", ttl, err)
		}
		if err := e.c.Set(ctx, "k", []byte("x"), ttl); !errors.Is(err, corral.ErrInvalidTTL) {
			t.Errorf("Set ttl %v = %v, want ErrInvalidTTL", ttl, err)
		}
	}
	if _, err := e.c.Fetch(ctx, "k", time.Minute, nil); !errors.Is(err, corral.ErrNilLoader) {
		t.Errorf("nil loader = %v", err)
	}
	if _, err := corral.Fetch[int](ctx, e.c, "k", time.Minute, nil); !errors.Is(err, corral.ErrNilLoader) {
		t.Errorf("typed nil loader = %v", err)
	}
	// A nil context is a programming error: a panic that says so, not a
	// nil dereference somewhere inside.
	var nilCtx context.Context
	for name, call := range map[string]func(){
		"Fetch":  func() { e.c.Fetch(nilCtx, "k", time.Minute, load) },
		"Get":    func() { e.c.Get(nilCtx, "k") },
		"Set":    func() { e.c.Set(nilCtx, "k", []byte("x"), time.Minute) },
		"Delete": func() { e.c.Delete(nilCtx, "k") },
		"typed": func() {
			corral.Fetch(nilCtx, e.c, "k", time.Minute, func(context.Context) (int, error) { return 1, nil })
		},
	} {
		if got := panicOf(call); got != "corral: nil Context" {
			t.Errorf("%s with a nil context panicked with %v; want \"corral: nil Context\"", name, got)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.c.Fetch(cancelled, "k2", time.Minute, load); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx = %v", err)
	}
	if v, err := e.c.Get(ctx, "k"); err != nil || string(v) != "keep" {
		t.Fatalf("after bad calls, k = %q, %v; want it untouched", v, err)
	}
}

func second[T any](_ T, err error) error { return err }

// panicOf calls f and returns what it panicked with (nil for nothing).
func panicOf(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestClosedCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	// A caller waiting on another process's lease when Close comes.
	other := newCache(t, e.srv.Client(), nil)
	holding := make(chan struct{})
	release := make(chan struct{})
	go other.Fetch(ctx, "{w}", time.Minute, func(context.Context) ([]byte, error) {
		close(holding)
		<-release
		return []byte("v"), nil
	})
	<-holding
	defer close(release)
	waiting := make(chan error, 1)
	go func() {
		_, err := e.c.Fetch(ctx, "{w}", time.Minute, value("x"))
		waiting <- err
	}()
	eventually(t, time.Second, "the caller waits", func() bool { return e.c.Stats().Waits == 1 })
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, corral.ErrClosed) {
		t.Fatalf("waiting caller got %v, want ErrClosed", err)
	}
	if err := e.c.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := e.c.Fetch(ctx, "k", time.Minute, value("v")); !errors.Is(err, corral.ErrClosed) {
		t.Errorf("Fetch after Close = %v", err)
	}
	if _, err := e.c.Get(ctx, "k"); !errors.Is(err, corral.ErrClosed) {
		t.Errorf("Get after Close = %v", err)
	}
	if err := e.c.Set(ctx, "k", nil, time.Minute); !errors.Is(err, corral.ErrClosed) {
		t.Errorf("Set after Close = %v", err)
	}
	if err := e.c.Delete(ctx, "k"); !errors.Is(err, corral.ErrClosed) {
		t.Errorf("Delete after Close = %v", err)
	}
}

func TestKeysAndValuesRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	keys := []string{"x", "{x}", "x:l", "}x", "{x", "user:{42}:p", "{a}{b}", "x{}y", "ключ", "\x00\xff bin\n", strings.Repeat("k", 4096)}
	for i, k := range keys {
		val := []byte{byte(i), 0, '{', '}', 0xff}
		got, err := e.c.Fetch(ctx, k, time.Minute, func(context.Context) ([]byte, error) { return val, nil })
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("Fetch(%q) = %v, %v", k, got, err)
		}
	}
	// No two keys share a name: each still holds its own value.
	for i, k := range keys {
		got, err := e.c.Get(ctx, k)
		if err != nil || got[0] != byte(i) {
			t.Fatalf("Get(%q) = %v, %v; want value %d", k, got, err, i)
		}
	}
	if n := e.rdb.DBSize(ctx).Val(); n != int64(len(keys)) {
		t.Fatalf("Redis holds %d names for %d keys (leases or strays left)", n, len(keys))
	}
	// A key's hash tag is kept: all of its names share it.
	if e.rdb.Exists(ctx, "corral:e:{42}:user:{42}:p").Val() != 1 {
		t.Fatal("entry of user:{42}:p is not at corral:e:{42}:user:{42}:p")
	}
}

func TestHugeValues(t *testing.T) {
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	e := newEnv(t, nil)
	got, err := e.c.Fetch(ctx, "big", time.Minute, func(context.Context) ([]byte, error) { return big, nil })
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Fetch 8 MiB: len %d, %v", len(got), err)
	}
	if got, err := e.c.Get(ctx, "big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get 8 MiB: len %d, %v", len(got), err)
	}

	// A value Redis refuses to store still reaches the callers.
	small := redistest.Start(t, "--proto-max-bulk-len", "1mb")
	c := newCache(t, small.Client(), &corral.Options{RedisTimeout: 2 * time.Second})
	got, err = c.Fetch(ctx, "big", time.Minute, func(context.Context) ([]byte, error) { return big, nil })
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Fetch over Redis's limit: len %d, %v; want the value anyway", len(got), err)
	}
	if c.Stats().RedisErrors == 0 {
		t.Fatal("the refused commit was not counted")
	}
}

func TestGetSetDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.c.Get(ctx, "k"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get absent = %v, want ErrMiss", err)
	}
	if err := e.c.Set(ctx, "k", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, err := e.c.Get(ctx, "k"); err != nil || v == nil || len(v) != 0 {
		t.Fatalf("Get after Set(nil) = %v, %v; want an empty value", v, err)
	}
	var runs atomic.Int32
	if v, err := e.c.Fetch(ctx, "k", time.Minute, slow(0, &runs, "loaded")); err != nil || len(v) != 0 || runs.Load() != 0 {
		t.Fatalf("Fetch after Set = %q, %v (loads %d); want the set value", v, err, runs.Load())
	}
	if err := e.c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete of a missing key = %v", err)
	}
	if _, err := e.c.Get(ctx, "k"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get after Delete = %v", err)
	}
	if v, _ := e.c.Fetch(ctx, "k", time.Minute, slow(0, &runs, "loaded")); string(v) != "loaded" || runs.Load() != 1 {
		t.Fatalf("Fetch after Delete = %q (loads %d)", v, runs.Load())
	}
	e.c.Fetch(ctx, "gone", time.Minute, func(context.Context) ([]byte, error) { return nil, corral.ErrNotFound })
	if _, err := e.c.Get(ctx, "gone"); !errors.Is(err, corral.ErrNotFound) {
		t.Fatalf("Get of a negative entry = %v, want ErrNotFound", err)
	}
	// The entry's Redis TTL is the soft TTL spread by the default ±10% jitter.
	e.c.Set(ctx, "{t}", []byte("x"), time.Minute)
	if ttl := e.rdb.PTTL(ctx, "corral:e:{t}:{t}").Val(); ttl < 53*time.Second || ttl > 66*time.Second {
		t.Fatalf("entry TTL %v, want 60s ± 10%%", ttl)
	}
}

// A load that started before a Delete or Set can never store its result
// afterwards (the stale-set problem); its callers still get what it loaded.
func TestWriteRevokesRunningLoad(t *testing.T) {
	t.Parallel()
	for _, write := range []string{"Delete", "Set"} {
		t.Run(write, func(t *testing.T) {
			e := newEnv(t, nil)
			ctx := context.Background()
			loading := make(chan struct{})
			finish := make(chan struct{})
			got := make(chan string, 1)
			go func() {
				v, err := e.c.Fetch(ctx, "{k}", time.Minute, func(context.Context) ([]byte, error) {
					close(loading)
					<-finish
					return []byte("old"), nil
				})
				if err != nil {
					t.Errorf("loader's caller: %v", err)
				}
				got <- string(v)
			}()
			<-loading
			var err error
			if write == "Delete" {
				err = e.c.Delete(ctx, "{k}")
			} else {
				err = e.c.Set(ctx, "{k}", []byte("new"), time.Minute)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := e.rdb.Get(ctx, leaseName("k")).Val(); got != "backoff" {
				t.Fatalf("%s left the lease %q; want it revoked (the marker)", write, got)
			}
			close(finish)
			if v := <-got; v != "old" {
				t.Fatalf("the loader's caller got %q", v)
			}
			v, err := e.c.Get(ctx, "{k}")
			if write == "Delete" && !errors.Is(err, corral.ErrMiss) || write == "Set" && string(v) != "new" {
				t.Fatalf("after %s and the old load: Get = %q, %v", write, v, err)
			}
			if st := e.c.Stats(); st.CommitsRejected != 1 {
				t.Fatalf("stats %+v; want 1 rejected commit", st)
			}
		})
	}
}

type user struct {
	ID   int
	Name string
	Tags []string
}

func TestTypedFetch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	var runs atomic.Int32
	load := func(context.Context) (user, error) {
		runs.Add(1)
		return user{7, "Ada", []string{"a"}}, nil
	}
	for range 2 {
		u, err := corral.Fetch(ctx, e.c, "user:7", time.Minute, load)
		if err != nil || u.Name != "Ada" || len(u.Tags) != 1 {
			t.Fatalf("Fetch[user] = %+v, %v", u, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("loads = %d", runs.Load())
	}
	if _, err := corral.Fetch(ctx, e.c, "user:8", time.Minute, func(context.Context) (user, error) {
		return user{}, corral.ErrNotFound
	}); !errors.Is(err, corral.ErrNotFound) {
		t.Fatalf("typed not found = %v", err)
	}
	// A cached value that does not decode as T is never a zero value: it is
	// a miss, reloaded with this loader (see TestDegraded_D4...).
	if v, err := corral.Fetch(ctx, e.c, "user:7", time.Minute, func(context.Context) (int, error) { return 1, nil }); err != nil || v != 1 {
		t.Fatalf("a user read as int = %v, %v; want the reloaded 1", v, err)
	}
}

// The callers of one flight share the value's slice: no copy per caller,
// however large the value (callers must not modify it; see Fetch).
func TestCallersShareTheValue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	gate := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]byte, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = e.c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
				<-gate
				return []byte("shared"), nil
			})
		}()
	}
	eventually(t, 5*time.Second, "all callers joined", func() bool { return e.c.Stats().Joined == 7 })
	close(gate)
	wg.Wait()
	for i, r := range results {
		if string(r) != "shared" || &r[0] != &results[0][0] {
			t.Fatalf("caller %d got %q in a slice of its own; want the shared one", i, r)
		}
	}
}

// A waiter in another process gets the holder's failure, as ErrRemoteLoad
// with its message. On a machine starved of CPU, its fallback re-check may
// run before it reads the notice: the lease is free by then, and it loads
// once itself. Those are the two answers the product gives; any other (a
// different error, more loads, a hang) fails.
func TestRemoteLoadErrorReachesWaiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	other := newCache(t, e.srv.Client(), nil)
	ctx := context.Background()
	fail := hold(t, e.c, "{k}", nil, errors.New("db exploded"))
	var loads atomic.Int32
	got := make(chan error, 1)
	go func() {
		_, err := other.Fetch(ctx, "{k}", time.Minute, slow(0, &loads, "mine"))
		got <- err
	}()
	waitSubscribed(t, e.rdb, "corral:n:{k}:{k}", 1)
	fail()
	err := <-got
	switch {
	case errors.Is(err, corral.ErrRemoteLoad) && strings.Contains(err.Error(), "db exploded") && loads.Load() == 0:
	case err == nil && loads.Load() == 1: // its re-check came first: it took the free lease and loaded
		t.Logf("the waiter re-checked before the notice, and loaded once (stats %+v)", other.Stats())
	default:
		t.Fatalf("remote waiter got %v after %d loads of its own; want ErrRemoteLoad with the message, or its own one load", err, loads.Load())
	}
}

// A Fetch that starts after Delete (or Set) returned never gets what was
// there before, even while a flight begun before the write is still running
// in the same process.
func TestReadAfterWriteInOneProcess(t *testing.T) {
	t.Parallel()
	for _, write := range []string{"Delete", "Set"} {
		t.Run(write, func(t *testing.T) {
			e := newEnv(t, nil)
			ctx := context.Background()
			finish := hold(t, e.c, "{k}", []byte("old"), nil)
			defer finish()
			if write == "Delete" {
				e.c.Delete(ctx, "{k}")
			} else {
				e.c.Set(ctx, "{k}", []byte("new"), time.Minute)
			}
			v, err := e.c.Fetch(ctx, "{k}", time.Minute, value("new"))
			if err != nil || string(v) != "new" {
				t.Fatalf("Fetch after %s = %q, %v; want the new value", write, v, err)
			}
		})
	}
}

func TestLoaderEdgeCases(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()

	// A panic carrying ErrNotFound is a failure: nothing is cached.
	_, err := e.c.Fetch(ctx, "{p}", time.Minute, func(context.Context) ([]byte, error) {
		panic(fmt.Errorf("lookup: %w", corral.ErrNotFound))
	})
	var pe *corral.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("panic(ErrNotFound) = %v, want a *PanicError", err)
	}
	if _, err := e.c.Get(ctx, "{p}"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("a panic was cached: Get = %v", err)
	}

	// A loader that calls runtime.Goexit fails its callers at once.
	start := time.Now()
	_, err = e.c.Fetch(ctx, "{g}", time.Minute, func(context.Context) ([]byte, error) {
		runtime.Goexit()
		return nil, nil
	})
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("Goexit in a loader: %v after %v; want an error at once", err, time.Since(start))
	}

	// A ttl meant as "forever" is stored as MaxTTL, not overflowed.
	if _, err := e.c.Fetch(ctx, "{forever}", math.MaxInt64, value("v")); err != nil {
		t.Fatal(err)
	}
	if ttl := e.rdb.PTTL(ctx, "corral:e:{forever}:{forever}").Val(); ttl < 80*365*24*time.Hour {
		t.Fatalf("entry TTL for ttl=MaxInt64 is %v; want about MaxTTL", ttl)
	}

	// A cancelled context is the caller's error, not a Redis one.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for name, err := range map[string]error{
		"Set":    e.c.Set(cancelled, "k", []byte("x"), time.Minute),
		"Delete": e.c.Delete(cancelled, "k"),
		"Get":    second(e.c.Get(cancelled, "k")),
	} {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v", name, err)
		}
	}
	if n := e.c.Stats().RedisErrors; n != 0 {
		t.Fatalf("RedisErrors = %d after calls with cancelled contexts", n)
	}
}
