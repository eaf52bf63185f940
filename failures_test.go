package corral_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// failOpts are options for a Cache in front of a failing Redis: short
// timeouts and a breaker that trips after 3 failures for 300 ms.
func failOpts() *corral.Options {
	return &corral.Options{RedisTimeout: 100 * time.Millisecond, BreakerThreshold: 3, BreakerCooldown: 300 * time.Millisecond}
}

// countCalls counts, from now until f's before hook is reset, the commands
// of calls f's client sends: not a liveness probe's PING, nor a
// connection's set-up.
func countCalls(f *faults) *atomic.Int32 {
	var calls atomic.Int32
	count := func(cmd redis.Cmder) error {
		if cmd.Name() != "ping" && !isSetup(cmd) {
			calls.Add(1)
		}
		return nil
	}
	f.before.Store(&count)
	return &calls
}

func TestCase_C06_RedisUnreachable(t *testing.T) {
	t.Parallel()
	for _, kind := range clientKinds {
		for _, variant := range []string{"refuses connections", "accepts and never answers"} {
			t.Run(kind.name+"/"+variant, func(t *testing.T) { redisUnreachable(t, variant, kind.opts) })
		}
	}
}

func redisUnreachable(t *testing.T, variant string, client func(*redis.Options)) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	o := &redis.Options{Addr: proxy.Addr, DialTimeout: 100 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}
	client(o)
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	sent := &faults{} // counts the commands sent
	rdb.AddHook(sent)
	opts := failOpts()
	opts.BreakerCooldown = 2 * time.Second // open for the whole check, even on a busy machine
	opts.FailSafe.Throttle = time.Minute   // the whole outage is one Throttle: one load of {K} in all
	logs := &testkit.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c := newCache(t, rdb, opts)
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	if variant == "refuses connections" {
		srv.Kill()
		proxy.Reset()
	} else {
		proxy.Blackhole(true)
	}

	// 100 concurrent Fetch of K: all get the loader's value, from one load.
	stampedeCalls := countCalls(sent)
	var runs atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.Fetch(ctx, "{K}", time.Minute, slow(20*time.Millisecond, &runs, "v"))
			if err != nil || string(v) != "v" {
				t.Errorf("Fetch = %q, %v; want the loader's value", v, err)
			}
		}()
	}
	wg.Wait()
	sent.before.Store(nil)
	// One Redis call for the 100 callers (a read: with a client that bounds
	// its I/O by the context, tried inline first, then in a batch with the
	// clock's sync), given up after RedisTimeout, then one load. That is
	// counted, not timed: on a starved machine the wall time of a 100 ms
	// timeout and a 20 ms load reaches a second (the target, about 120 ms,
	// is logged). Held past 2 s, the callers waited for something else.
	took := time.Since(start)
	t.Logf("100 callers answered in %v (target: about 120ms), %d commands sent", took, stampedeCalls.Load())
	if n := stampedeCalls.Load(); runs.Load() != 1 || n > 3 || took > 2*time.Second {
		t.Fatalf("%d loads, %d commands sent, %v; want 1 load after one Redis call given up after RedisTimeout", runs.Load(), n, took)
	}
	// A few more failures trip the breaker; then calls skip Redis.
	for i := 0; !c.Stats().BreakerOpen; i++ {
		if i == 10 {
			t.Fatalf("breaker still closed after 10 failed calls: %+v", c.Stats())
		}
		c.Fetch(ctx, "{K}", time.Minute, slow(20*time.Millisecond, &runs, "v"))
	}
	// The warning names the server and what went wrong.
	warning := ""
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "circuit breaker open") {
			warning = line
		}
	}
	if !strings.Contains(warning, "node="+proxy.Addr) || strings.Contains(warning, "err=<nil>") || !strings.Contains(warning, "err=") {
		t.Fatalf("breaker warning %q; want the node's address and the cause (logged:\n%s)", warning, logs.String())
	}
	t.Log(warning)
	// No command is sent for the call. (The node's liveness probe, a
	// connection and a PING for a batch still unanswered, e.g. the
	// first-use checks' sent as Redis went away, is not the call's.)
	calls := countCalls(sent)
	if v, err := c.Fetch(ctx, "{K}", time.Minute, slow(20*time.Millisecond, &runs, "v")); err != nil || string(v) != "v" || calls.Load() != 0 {
		t.Fatalf("with the breaker open: %q, %v, %d commands sent; want the value without asking Redis", v, err, calls.Load())
	}
	sent.before.Store(nil)
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d loads of {K} during the outage; want 1 in the process", n)
	}
	// Get answers what the process holds from memory, and says Redis is
	// unavailable for a key it does not hold. (Get is not a call: Stats
	// count none of its answers.)
	safe := c.Stats().FailSafeHits
	if v, err := c.Get(ctx, "{K}"); err != nil || string(v) != "v" || c.Stats().FailSafeHits != safe {
		t.Fatalf("Get of a held key with the breaker open = %q, %v; want its value from memory", v, err)
	}
	if _, err := c.Get(ctx, "{other}"); !errors.Is(err, corral.ErrCircuitOpen) {
		t.Fatalf("Get of a key not held with the breaker open = %v; want ErrCircuitOpen", err)
	}

	// Redis comes back: caching resumes on its own.
	if variant == "refuses connections" {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	} else {
		proxy.Blackhole(false)
		proxy.Reset()
	}
	entry := wire.NewNames("corral", "{K}").Entry
	// Caching resumes, and the breaker closes. A connection the client kept
	// from before the outage may fail the first exchange after it (reset by
	// the proxy) and trip the breaker once more, for its cooldown, while a
	// commit through another connection already stored the entry: both are
	// waited for.
	eventually(t, 10*time.Second, "caching resumes and the breaker closes", func() bool {
		c.Fetch(ctx, "{K}", time.Minute, value("v"))
		return srv.Client().Exists(ctx, entry).Val() == 1 && !c.Stats().BreakerOpen // in Redis, not only in memory
	})
	if st := c.Stats(); st.BreakerOpens == 0 || st.FailOpens == 0 {
		t.Fatalf("stats after recovery %+v", st)
	}
}

func TestNewWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Kill()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	c := newCache(t, rdb, failOpts())
	ctx := context.Background()
	if v, err := c.Fetch(ctx, "k", time.Minute, value("v")); err != nil || string(v) != "v" {
		t.Fatalf("Fetch with Redis down = %q, %v; want fail-open", v, err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "the first value is cached", func() bool {
		c.Fetch(ctx, "k", time.Minute, value("v"))
		return srv.Client().Exists(ctx, wire.NewNames("corral", "k").Entry).Val() == 1 // in Redis, not only in memory
	})
}

func TestDisableFailOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(func(o *redis.Options) { o.DialTimeout, o.MaxRetries = 100*time.Millisecond, -1 })
	o := failOpts()
	o.DisableFailOpen = true
	c := newCache(t, rdb, o)
	srv.Kill()
	var runs atomic.Int32
	_, err := c.Fetch(context.Background(), "k", time.Minute, slow(0, &runs, "v"))
	// The error is the refused connection, or the breaker it tripped at
	// once (wrapping it).
	var netErr *net.OpError
	if !(errors.As(err, &netErr) || errors.Is(err, corral.ErrCircuitOpen)) || runs.Load() != 0 {
		t.Fatalf("Fetch = %v with %d loads; want the Redis error, wrapped, and no load", err, runs.Load())
	}
}

// TestWrongPassword: a client whose connections Redis refuses at AUTH gets
// errors that say so, through the pipeline and inline reads alike (the
// pipeline's Exec fails with no command run), and Fetch fails open.
func TestWrongPassword(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	for _, inline := range []bool{false, true} {
		rdb := srv.Client(func(o *redis.Options) { o.Password, o.ContextTimeoutEnabled = "wrong", inline })
		c := newCache(t, rdb, nil)
		if _, err := c.Get(context.Background(), "k"); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("inline %v: Get = %v; want the WRONGPASS reply", inline, err)
		}
		o := failOpts()
		o.DisableFailOpen = true
		c = newCache(t, rdb, o)
		var runs atomic.Int32
		if _, err := c.Fetch(context.Background(), "k", time.Minute, slow(0, &runs, "v")); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("inline %v: Fetch with DisableFailOpen = %v; want the WRONGPASS reply", inline, err)
		}
		c = newCache(t, rdb, failOpts())
		if v, err := c.Fetch(context.Background(), "k", time.Minute, slow(0, &runs, "v")); err != nil || string(v) != "v" {
			t.Errorf("inline %v: Fetch = %q, %v; want v, failing open", inline, v, err)
		}
	}
}

// SCRIPT FLUSH, or a restart, drops corral's scripts from Redis: callers
// never notice (go-redis falls back from EVALSHA to EVAL on NOSCRIPT).
func TestScriptsReloadAfterFlushAndRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	e.c.Fetch(ctx, "k", time.Minute, value("v"))
	e.rdb.ScriptFlush(ctx)
	if v, err := e.c.Fetch(ctx, "k", time.Minute, value("x")); err != nil || string(v) != "v" {
		t.Fatalf("after SCRIPT FLUSH: %q, %v", v, err)
	}
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := e.c.Fetch(ctx, "k", time.Minute, value("after")); err != nil || string(v) != "after" {
		t.Fatalf("after a restart: %q, %v", v, err)
	}
	if v, err := e.c.Get(ctx, "k"); err != nil || string(v) != "after" {
		t.Fatalf("not cached after a restart: %q, %v", v, err)
	}
}

// A waiter whose pub/sub connection drops still gets the value: go-redis
// reconnects and re-subscribes, and the waiter's timer covers a notice lost
// meanwhile.
func TestPubSubConnectionDrops(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	ctx := context.Background()
	holder := newCache(t, srv.Client(), &corral.Options{LeaseTTL: 2 * time.Second})
	waiterRdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { waiterRdb.Close() })
	waiter := newCache(t, waiterRdb, &corral.Options{LeaseTTL: 2 * time.Second})

	finish := hold(t, holder, "{k}", []byte("v"), nil)
	got := make(chan string, 1)
	go func() {
		v, _ := waiter.Fetch(ctx, "{k}", time.Minute, value("not me"))
		got <- string(v)
	}()
	waitSubscribed(t, srv.Client(), "corral:n:{k}:{k}", 1)
	proxy.Reset() // the waiter's connections drop, its pub/sub one included
	finish()      // the notice may be lost while it reconnects
	select {
	case v := <-got:
		if v != "v" {
			t.Fatalf("waiter got %q", v)
		}
	case <-time.After(5 * time.Second): // past the timer: LeaseTTL and a quarter
		t.Fatal("waiter still waiting 5s after the load ended")
	}
	// The pub/sub connection is back and subscribed again for later waits.
	finish2 := hold(t, holder, "{k2}", []byte("v2"), nil)
	go func() {
		v, _ := waiter.Fetch(ctx, "{k2}", time.Minute, value("not me"))
		got <- string(v)
	}()
	waitSubscribed(t, srv.Client(), "corral:n:{k2}:{k2}", 1)
	released := time.Now()
	finish2()
	select {
	case v := <-got:
		if v != "v2" || time.Since(released) > prompt {
			t.Fatalf("second waiter got %q after %v; want the notice", v, time.Since(released))
		}
	case <-time.After(2 * time.Second):
		t.Fatal("second waiter still waiting")
	}
}

// A Redis whose replies (a PING's too) all come later than RedisTimeout is
// silent past the stall bound, a failing Redis: callers get the loader's
// value in about RedisTimeout, the breaker trips, and caching resumes when
// Redis answers in time again.
func TestSlowRedis(t *testing.T) {
	t.Parallel()
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) { slowRedis(t, kind.opts) })
	}
}

func slowRedis(t *testing.T, client func(*redis.Options)) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	o := &redis.Options{Addr: proxy.Addr, ReadTimeout: 5 * time.Second}
	client(o)
	rdb := redis.NewClient(o)
	t.Cleanup(func() { rdb.Close() })
	checked := startUpChecked(rdb)
	c := newCache(t, rdb, failOpts())
	ctx := context.Background()
	c.Fetch(ctx, "warm", time.Minute, value("w"))
	// Its start-up checks answered first: one answered late would say that
	// Redis is slow, not silent (on a busy machine they can overlap).
	eventually(t, 10*time.Second, "the start-up checks answered", checked)
	proxy.Latency(2 * time.Second) // far past RedisTimeout (100ms) + slack
	t0 := time.Now()
	if v, err := c.Fetch(ctx, "{slow}", time.Minute, value("v")); err != nil || string(v) != "v" || time.Since(t0) > 100*time.Millisecond+slack {
		t.Fatalf("Fetch through a slow Redis = %q, %v after %v; want the value after about RedisTimeout", v, err, time.Since(t0))
	}
	for i := 0; !c.Stats().BreakerOpen; i++ {
		if i == 10 {
			t.Fatalf("breaker still closed: %+v", c.Stats())
		}
		c.Fetch(ctx, "{slow}", time.Minute, value("v"))
	}
	proxy.Latency(0)
	eventually(t, 10*time.Second, "caching resumes", func() bool {
		c.Fetch(ctx, "{slow}", time.Minute, value("v"))
		_, err := c.Get(ctx, "{slow}")
		return err == nil
	})
}

// A Redis that goes silent fails a call at its bound, the node's probe
// (sent 100 ms into the call) unanswered for the rest of it: RedisTimeout
// after the call was sent, plus a monitor tick; within RedisTimeout + 250 ms
// (the release before waited about 2 x RedisTimeout + 100 ms).
func TestSilentRedisBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	const timeout = time.Second
	c := newCache(t, rdb, &corral.Options{RedisTimeout: timeout})
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	t0 := time.Now()
	v, err := c.Fetch(ctx, "{silent}", time.Minute, value("v"))
	took := time.Since(t0)
	if err != nil || string(v) != "v" {
		t.Fatalf("Fetch through a silent Redis = %q, %v; want the loader's value (fail-open)", v, err)
	}
	if took < timeout || took > timeout+250*time.Millisecond+slack {
		t.Fatalf("failed open after %v; want between RedisTimeout (1s) and RedisTimeout + 250 ms", took)
	}
	t.Logf("failed open after %v", took.Round(time.Millisecond))
	proxy.Blackhole(false)
	proxy.Reset()
}

// startUpChecked hooks rdb, a client of one server, before a Cache is made
// on it, and reports whether that Cache's start-up (start.lua on
// Prefix:probe, on its own or carried by the first peek, which learns the
// mode, the rights and the eviction policy) has had its reply.
func startUpChecked(rdb *redis.Client) func() bool {
	var started atomic.Bool
	f := &faults{}
	f.setAfter(func(cmd redis.Cmder) error {
		a := cmd.Args()
		if name := strings.ToLower(fmt.Sprint(a[0])); (name == "eval" || name == "evalsha") && cmd.Err() == nil && slices.Contains(a, any("corral:probe")) {
			started.Store(true)
		}
		return nil
	})
	rdb.AddHook(f)
	return started.Load
}
