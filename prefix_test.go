package corral_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Every error corral returns says "corral:" once, at the front, however
// many of corral's own errors it wraps, and still matches its sentinels
// (and the context's errors) with errors.Is. The Caches here use Prefix
// "app": under the default prefix a Redis name quoted in an error
// ("corral:e:{…}:k") would say corral: too, and is not a prefix.

// prefixOpts are the options of the Caches below: Prefix "app", and a
// logger whose records are checked too (sayOnceInLogs).
func prefixOpts(logs *testkit.Buffer) *corral.Options {
	return &corral.Options{Prefix: "app", Logger: slogTo(logs), RedisTimeout: 200 * time.Millisecond,
		BreakerThreshold: 2, BreakerCooldown: time.Minute}
}

// sayOnce fails t unless err says "corral:" once, at the front, and
// matches each of targets.
func sayOnce(t *testing.T, what string, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	text := err.Error()
	t.Logf("%s: %s", what, text)
	if !strings.HasPrefix(text, "corral: ") || strings.Count(text, "corral:") != 1 {
		t.Errorf("%s: %q; want corral: once, at the front", what, text)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("%s: %q does not match %v", what, text, target)
		}
	}
}

// sayOnceInLogs fails t unless each record logged says "corral:" at most
// once (its message; an "err" attribute goes without the prefix).
func sayOnceInLogs(t *testing.T, logs *testkit.Buffer) {
	t.Helper()
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Count(line, "corral:") > 1 {
			t.Errorf("a log record says corral: more than once:\n%s", line)
		}
	}
}

func TestErrorsSayCorralOnce_BadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs testkit.Buffer
	ctx := context.Background()
	_, err := corral.New(nil, nil)
	sayOnce(t, "New(nil)", err, corral.ErrInvalidOptions)
	_, err = corral.New(srv.Client(), &corral.Options{Prefix: "a{b"})
	sayOnce(t, "New with a brace in Prefix", err, corral.ErrInvalidOptions)
	_, err = corral.New(srv.Client(), &corral.Options{NearCache: corral.NearCacheOptions{Size: -1}})
	sayOnce(t, "New with a negative NearCache.Size", err, corral.ErrInvalidOptions)
	opts := prefixOpts(&logs)
	opts.MaxValueBytes = 4
	c := newCache(t, srv.Client(), opts)
	_, err = c.Fetch(ctx, "", time.Minute, value("v"))
	sayOnce(t, "Fetch of an empty key", err, corral.ErrInvalidKey)
	_, err = c.Fetch(ctx, "k", time.Minute, nil)
	sayOnce(t, "Fetch with a nil loader", err, corral.ErrNilLoader)
	_, err = c.Fetch(ctx, "k", 0, value("v"))
	sayOnce(t, "Fetch with ttl 0", err, corral.ErrInvalidTTL)
	_, err = c.Get(ctx, "")
	sayOnce(t, "Get of an empty key", err, corral.ErrInvalidKey)
	_, err = c.Get(ctx, "absent")
	sayOnce(t, "Get of an absent key", err, corral.ErrMiss)
	sayOnce(t, "Set with ttl -1s", c.Set(ctx, "k", []byte("v"), -time.Second), corral.ErrInvalidTTL)
	sayOnce(t, "Set over MaxValueBytes", c.Set(ctx, "k", []byte("too large"), time.Minute), corral.ErrValueTooLarge)
	sayOnce(t, "Delete of an empty key", c.Delete(ctx, ""), corral.ErrInvalidKey)
	_, err = c.FetchMany(ctx, []string{"a"}, time.Minute, nil)
	sayOnce(t, "FetchMany with a nil loader", err, corral.ErrNilLoader)
	_, err = c.FetchMany(ctx, []string{"", "b", "c"}, time.Minute, func(context.Context, []string) (map[string][]byte, error) {
		return nil, corral.ErrInvalidKey // a loader passing corral's error on
	})
	var be *corral.BatchError
	sayOnce(t, "FetchMany's BatchError", err, corral.ErrInvalidKey)
	if !errors.As(err, &be) || len(be.Errs) != 3 {
		t.Errorf("FetchMany: %v; want a BatchError for 3 keys", err)
	}
	sayOnceInLogs(t, &logs)
}

// brokenCodec (degraded_test.go) encodes anything and decodes nothing.
var errNoDecode = errors.New("brokenCodec cannot decode")

type failingCodec struct{ brokenCodec }

func (failingCodec) Unmarshal([]byte, any) error { return errNoDecode }

func TestErrorsSayCorralOnce_Loads(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs testkit.Buffer
	ctx := context.Background()
	opts := prefixOpts(&logs)
	opts.LoadTimeout, opts.ErrorTTL = 50*time.Millisecond, time.Minute
	c := newCache(t, srv.Client(), opts)
	blocked := func(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() }
	_, err := c.Fetch(ctx, "slow", time.Minute, blocked)
	sayOnce(t, "a load past LoadTimeout", err, corral.ErrLoadTimeout, context.DeadlineExceeded)
	_, err = c.Fetch(ctx, "slow", time.Minute, value("v"))
	sayOnce(t, "the cached failure (ErrorTTL)", err, corral.ErrCachedFailure)
	_, err = c.Fetch(ctx, "panics", time.Minute, func(context.Context) ([]byte, error) { panic(corral.ErrMiss) })
	var pe *corral.PanicError
	sayOnce(t, "a loader's panic", err, corral.ErrMiss)
	if !errors.As(err, &pe) {
		t.Errorf("a loader's panic: %v; want a PanicError", err)
	}
	_, err = corral.Fetch(ctx, c, "chan", time.Minute, func(context.Context) (chan int, error) { return make(chan int), nil })
	sayOnce(t, "Fetch[chan int] (encode)", err)
	dc := newCache(t, srv.Client(), &corral.Options{Prefix: "app2", Codec: failingCodec{}, Logger: slogTo(&logs)})
	_, err = corral.Fetch(ctx, dc, "k", time.Minute, func(context.Context) (int, error) { return 1, nil })
	sayOnce(t, "Fetch[int] that does not decode", err, errNoDecode)

	// A waiter in another process hears the holder's failure, itself one
	// of corral's errors (ErrLoadTimeout). Neither caches failures: the
	// waiter's own re-check would read it, as ErrCachedFailure.
	holder, other := newCache(t, srv.Client(), prefixOpts(&logs)), newCache(t, srv.Client(), prefixOpts(&logs))
	fail := hold(t, holder, "{remote}", nil, corral.ErrLoadTimeout)
	var loads atomic.Int32
	got := make(chan error, 1)
	go func() {
		_, err := other.Fetch(ctx, "{remote}", time.Minute, slow(0, &loads, "mine"))
		got <- err
	}()
	waitSubscribed(t, srv.Client(), "app:n:{remote}:{remote}", 1)
	fail()
	if err := <-got; err != nil || loads.Load() != 1 { // else its re-check came first, and it loaded
		sayOnce(t, "a remote load's failure", err, corral.ErrRemoteLoad)
	}
	sayOnceInLogs(t, &logs)
}

func TestErrorsSayCorralOnce_Closed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs testkit.Buffer
	ctx := context.Background()
	c, err := corral.New(srv.Client(), prefixOpts(&logs))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = c.Fetch(ctx, "k", time.Minute, value("v"))
	sayOnce(t, "Fetch after Close", err, corral.ErrClosed)
	_, err = c.Get(ctx, "k")
	sayOnce(t, "Get after Close", err, corral.ErrClosed)
	sayOnce(t, "Set after Close", c.Set(ctx, "k", nil, time.Minute), corral.ErrClosed)
	sayOnce(t, "Delete after Close", c.Delete(ctx, "k"), corral.ErrClosed)
	_, err = c.FetchMany(ctx, []string{"k"}, time.Minute, func(context.Context, []string) (map[string][]byte, error) { return nil, nil })
	sayOnce(t, "FetchMany after Close", err, corral.ErrClosed)
	sayOnceInLogs(t, &logs)
}

// Redis killed under a Cache that does not fail open: every call's error,
// the breaker's, Health's, the queued invalidations', and Check's.
func TestErrorsSayCorralOnce_RedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs testkit.Buffer
	ctx := context.Background()
	opts := prefixOpts(&logs)
	opts.DisableFailOpen = true
	rdb := quickStartClient(t, srv.Addr)
	c := newCache(t, rdb, opts)
	if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	_, err := c.Fetch(ctx, "k", time.Minute, value("v"))
	sayOnce(t, "Fetch with Redis killed", err)
	eventually(t, 5*time.Second, "the breaker open", func() bool { return errors.Is(c.Health(), corral.ErrCircuitOpen) })
	sayOnce(t, "Health", c.Health(), corral.ErrCircuitOpen)
	_, err = c.Fetch(ctx, "k", time.Minute, value("v"))
	sayOnce(t, "Fetch, breaker open", err, corral.ErrCircuitOpen)
	_, err = c.Get(ctx, "k")
	sayOnce(t, "Get, breaker open", err, corral.ErrCircuitOpen)
	sayOnce(t, "Set, queued", c.Set(ctx, "k", []byte("v"), time.Minute), corral.ErrCircuitOpen)
	sayOnce(t, "Delete, queued", c.Delete(ctx, "k2"), corral.ErrCircuitOpen)
	_, err = c.FetchMany(ctx, []string{"a", "b"}, time.Minute, func(context.Context, []string) (map[string][]byte, error) { return nil, nil })
	sayOnce(t, "FetchMany, breaker open", err, corral.ErrCircuitOpen)
	_, err = corral.Check(ctx, rdb, nil)
	sayOnce(t, "Check with Redis killed", err)
	_, err = corral.Check(ctx, rdb, &corral.Options{Prefix: "a{b"})
	sayOnce(t, "Check with a brace in Prefix", err, corral.ErrInvalidOptions)
	sayOnceInLogs(t, &logs)
}

// A silent Redis: calls end with ErrRedisTimeout, which names the latest
// error Redis calls got.
func TestErrorsSayCorralOnce_RedisSilent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	var logs testkit.Buffer
	ctx := context.Background()
	opts := prefixOpts(&logs)
	opts.DisableFailOpen, opts.DisableBreaker = true, true
	c := newCache(t, redis.NewClient(&redis.Options{Addr: proxy.Addr}), opts)
	// Warm, before the silence: a loaded machine once took the first call
	// past its 200 ms RedisTimeout.
	eventually(t, 10*time.Second, "a warm-up call answered", func() bool {
		_, err := c.Fetch(ctx, "warm", time.Minute, value("w"))
		return err == nil
	})
	proxy.Blackhole(true)
	_, err := c.Get(ctx, "k")
	sayOnce(t, "Get with Redis silent", err, corral.ErrRedisTimeout)
	_, err = c.Fetch(ctx, "k", time.Minute, value("v"))
	sayOnce(t, "Fetch with Redis silent", err, corral.ErrRedisTimeout)
	proxy.Blackhole(false)
	sayOnceInLogs(t, &logs)
}

// Redis refuses: an ACL user without the keys' right (NOPERM), a Redis out
// of memory (OOM), a replica (READONLY), and Check's failing Report.
func TestErrorsSayCorralOnce_Refusals(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs testkit.Buffer
	ctx := context.Background()
	denied := newCache(t, aclClient(t, srv, "app", "~other:*", "&app:*", "+@all"), prefixOpts(&logs))
	_, err := denied.Fetch(ctx, "k", time.Minute, value("v"))
	sayOnce(t, "Fetch denied", err, corral.ErrPermission)
	_, err = denied.Get(ctx, "k")
	sayOnce(t, "Get denied", err, corral.ErrPermission)
	sayOnce(t, "Set denied", denied.Set(ctx, "k", []byte("v"), time.Minute), corral.ErrPermission)
	sayOnce(t, "Delete denied", denied.Delete(ctx, "k"), corral.ErrPermission)
	report, err := corral.Check(ctx, aclClient(t, srv, "checker", "~other:*", "&app:*", "+@all", "-config"), &corral.Options{Prefix: "app"})
	if err != nil {
		t.Fatal(err)
	}
	sayOnce(t, "Check as a user denied the keys", report.Err(), corral.ErrCheckFailed)
	for _, f := range report.Findings { // corral's words, then Redis's: no corral: of an error's
		if strings.Contains(f.Detail, "corral: ") {
			t.Errorf("Finding %s: %q", f.Topic, f.Detail)
		}
	}

	full := newCache(t, srv.Client(), prefixOpts(&logs))
	srv.OutOfMemory(t)
	sayOnce(t, "Set out of memory", full.Set(ctx, "k", []byte("v"), time.Minute), corral.ErrWriteRefused)

	replica := redistest.StartReplica(t)
	ro := newCache(t, replica.Client(), prefixOpts(&logs))
	sayOnce(t, "Set on a replica", ro.Set(ctx, "k", []byte("v"), time.Minute), corral.ErrWriteRefused)
	report, err = corral.Check(ctx, replica.Client(), &corral.Options{Prefix: "app"})
	if err != nil {
		t.Fatal(err)
	}
	sayOnce(t, "Check of a replica", report.Err(), corral.ErrCheckFailed)
	sayOnceInLogs(t, &logs)
}

// The package makes its errors with errorf (errors.go), never fmt.Errorf,
// whose wraps would repeat an inner error's "corral: ".
func TestErrorsAreMadeByErrorf(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.Contains(line, "fmt.Errorf(") {
				t.Errorf("%s:%d: fmt.Errorf; use errorf: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
