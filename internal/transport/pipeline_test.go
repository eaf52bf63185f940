package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// The transport on its own, against real redis-servers: what it sends, how
// it shares round trips, and how it tells a node that is down.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPipeline returns a Pipeline on rdb, closed when t ends. cfg's zero
// fields get a test's defaults: a 2 s timeout, a breaker that opens after
// 5 failures for 2 s.
func newPipeline(t testing.TB, rdb redis.UniversalClient, cfg Config) *Pipeline {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Rand == nil {
		cfg.Rand = func() float64 { return 0.5 }
	}
	if cfg.Breaker.Threshold == 0 {
		cfg.Breaker.Threshold, cfg.Breaker.Cooldown = 5, 2*time.Second
	}
	p := New(rdb, cfg)
	t.Cleanup(func() { p.Close().Wait() })
	return p
}

// get is a GET of key as an op, which may be read inline.
func get(ctx context.Context, key string) *Op {
	args := []any{"get", key}
	return &Op{Ctx: ctx, Key: key, Read: args, ReadOnly: true,
		Build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return p.Do(ctx, args...) },
	}
}

// value is the string a GET's result carries, or the error it met.
func value(r Result) (string, error) {
	if r.Err != nil {
		return "", r.Err
	}
	return r.Cmd.(*redis.Cmd).Text()
}

// sendWait sends o with Send (inline when it may) and waits for its
// result.
func sendWait(p *Pipeline, o *Op) Result {
	done := make(chan Result, 1)
	o.Finish = func(r Result) { done <- r }
	p.Send(o)
	return <-done
}

// changes records what a Pipeline tells its Stats and its Recovered, in
// order.
type changes struct {
	mu     sync.Mutex
	events []string
	closed chan struct{} // closed at the first BreakerClosed
	once   sync.Once
}

func newChanges() *changes { return &changes{closed: make(chan struct{})} }

func (c *changes) add(e string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

func (c *changes) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.events...)
}

func (c *changes) BreakerChanged(_ string, to BreakerState) {
	c.add([...]string{"closed", "half-open", "open"}[to])
	if to == BreakerClosed {
		c.once.Do(func() { close(c.closed) })
	}
}

// Concurrent ops share round trips: a thousand GETs from as many
// goroutines, each reply 20 ms late, go in a few dozen batches, not one
// each, and each gets its own reply.
func TestBatchesShareRoundTrips(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	for i := range 10 {
		admin.Set(ctx, "k"+strconv.Itoa(i), "v"+strconv.Itoa(i), 0)
	}
	proxy := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { rdb.Close() })
	p := newPipeline(t, rdb, Config{})
	if _, err := value(p.Do(get(ctx, "k0"))); err != nil {
		t.Fatal(err)
	}
	proxy.Latency(20 * time.Millisecond)
	const n = 1000
	before := p.Batches()
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for i := range n {
		wg.Go(func() {
			k := strconv.Itoa(i % 10)
			if v, err := value(p.Do(get(ctx, "k"+k))); err != nil || v != "v"+k {
				wrong.Add(1)
			}
		})
	}
	wg.Wait()
	sent := p.Batches() - before
	if wrong.Load() != 0 || sent > n/10 {
		t.Fatalf("%d GETs from as many goroutines: %d wrong replies, %d batches; want none wrong, at most %d batches", n, wrong.Load(), sent, n/10)
	}
	t.Logf("%d concurrent GETs in %d batches", n, sent)

	// SendAll queues its ops together: one batch.
	before = p.Batches()
	ops := make([]*Op, 100)
	results := make(chan Result, len(ops))
	for i := range ops {
		ops[i] = get(ctx, "k"+strconv.Itoa(i%10))
		ops[i].Finish = func(r Result) { results <- r }
	}
	p.SendAll(ops)
	for range ops {
		if _, err := value(<-results); err != nil {
			t.Fatal(err)
		}
	}
	if sent := p.Batches() - before; sent != 1 {
		t.Fatalf("SendAll of %d ops sent %d batches; want 1", len(ops), sent)
	}
}

// A node that falls silent (a black hole: connections accepted, nothing
// answered) fails its batch with ErrRedisTimeout, and trips its breaker:
// later ops fail at once with ErrCircuitOpen. Once it answers again, its
// recovery probe calls Recovered, whose own ops (Op.Recovery) pass while
// the others are still kept out, and only then does the breaker close.
// A Recovered whose ops did not get through (here the first: it says so
// with ErrRedisTimeout) keeps the breaker open, and is called again.
func TestBlackholedNodeTripsAndRecovers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { rdb.Close() })
	ch := newChanges()
	var p *Pipeline
	var during struct{ recovery, other error }
	ctx := context.Background()
	calls := 0 // of Recovered, by the one recovery probe
	p = newPipeline(t, rdb, Config{Timeout: 200 * time.Millisecond, Stats: ch,
		Recovered: func(string) error {
			ch.add("recovered")
			if calls++; calls == 1 {
				return fmt.Errorf("replay: %w", ErrRedisTimeout) // its ops did not get through
			}
			set := &Op{Ctx: ctx, Key: "k", Recovery: true,
				Build: func(ctx context.Context, pp redis.Pipeliner) redis.Cmder { return pp.Set(ctx, "k", "replayed", 0) }}
			during.recovery = resultErr(p.Do(set))
			during.other = p.Tripped("k")
			return nil
		},
	})
	if _, err := value(p.Do(get(ctx, "k"))); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET before the black hole = %v; want redis.Nil", err)
	}

	proxy.Blackhole(true)
	t0 := time.Now()
	_, err := value(p.Do(get(ctx, "k")))
	if took := time.Since(t0); !errors.Is(err, ErrRedisTimeout) || took > 2*time.Second {
		t.Fatalf("GET from a black hole = %v after %v; want ErrRedisTimeout about 200ms after it was sent", err, took)
	}
	// The trip follows the batch's failure, and counts the node tripped
	// once its breaker has told Stats.
	testkit.Eventually(t, 10*time.Second, "the node tripped", func() bool { return p.Tripped("k") != nil })
	if err := p.Tripped("k"); !errors.Is(err, ErrCircuitOpen) || !errors.Is(err, ErrRedisTimeout) {
		t.Fatalf("Tripped after the silence = %v; want ErrCircuitOpen wrapping ErrRedisTimeout", err)
	}
	t0 = time.Now()
	if _, err := value(p.Do(get(ctx, "k"))); !errors.Is(err, ErrCircuitOpen) || time.Since(t0) > 100*time.Millisecond {
		t.Fatalf("GET while tripped = %v after %v; want ErrCircuitOpen at once", err, time.Since(t0))
	}
	if !p.BreakerOpen() || p.OpenErr() == nil {
		t.Fatal("BreakerOpen or OpenErr say nothing of the trip")
	}

	proxy.Blackhole(false)
	proxy.Reset() // connections that lost data are out of step
	select {
	case <-ch.closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("breaker still open 10s after the node answered again: %v", ch.list())
	}
	if got := strings.Join(ch.list(), " "); got != "open recovered recovered closed" {
		t.Fatalf("changes: %s; want open recovered recovered closed (the first Recovered failed)", got)
	}
	if during.recovery != nil || !errors.Is(during.other, ErrCircuitOpen) {
		t.Fatalf("during Recovered: the recovery's op = %v, another op's would get %v; want nil, ErrCircuitOpen", during.recovery, during.other)
	}
	if v, err := value(p.Do(get(ctx, "k"))); err != nil || v != "replayed" {
		t.Fatalf("GET after the recovery = %q, %v; want the recovery's SET", v, err)
	}
}

// A dial the server refuses is found at once, through the node's probe
// connection, whatever the client's own retries: the op fails within a
// fraction of the timeout, classified Unreachable and RefusedDial, and the
// node is tripped.
func TestRefusedDialClassifiedAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	if err := proxy.Refuse(true); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr}) // go-redis's retries: seconds on a refused dial
	t.Cleanup(func() { rdb.Close() })
	p := newPipeline(t, rdb, Config{})
	t0 := time.Now()
	_, err := value(p.Do(get(context.Background(), "k")))
	took := time.Since(t0)
	t.Logf("answered after %v", took) // a few ms on a quiet machine
	// The bound is the timeout the answer must beat (the classification,
	// not a timer, ended the call); a starved machine stretches the rest.
	if c := Classify(err); c&Unreachable == 0 || c&RefusedDial == 0 || took >= 2*time.Second {
		t.Fatalf("GET from a refusing server = %v (class %b) after %v; want Unreachable and RefusedDial, within the 2s timeout", err, c, took)
	}
	if err := p.Tripped("k"); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Tripped after a refused dial = %v; want ErrCircuitOpen", err)
	}
}

// A script the server lacks (NOSCRIPT to its EVALSHA) goes again with its
// source, in the pipeline's next batch, and its caller gets the script's
// reply.
func TestNoScriptResent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	var mu sync.Mutex
	var sent []string
	rdb.AddHook(nameHook(func(name string) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, name)
	}))
	p := newPipeline(t, rdb, Config{})
	sc := redis.NewScript("return 'ran ' .. ARGV[1]")
	ctx := context.Background()
	r := p.Do(&Op{Ctx: ctx, Key: "k",
		Build: func(ctx context.Context, pp redis.Pipeliner) redis.Cmder {
			return sc.EvalSha(ctx, pp, []string{"k"}, "once")
		},
		Rebuild: func(ctx context.Context, pp redis.Pipeliner) redis.Cmder {
			return sc.Eval(ctx, pp, []string{"k"}, "once")
		},
	})
	if v, err := value(r); err != nil || v != "ran once" {
		t.Fatalf("script = %q, %v; want \"ran once\"", v, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(sent, " ") != "evalsha eval" {
		t.Fatalf("sent %v; want evalsha (NOSCRIPT), then eval", sent)
	}
}

// Many ops of a script the server lacks, sent together, go again with the
// script's source once, the others with its SHA behind it: a cold server
// (restarted, failed over, flushed) is not sent the source once per op.
// Each caller gets its own reply.
func TestNoScriptSourceSentOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	var mu sync.Mutex
	sent := map[string]int{}
	rdb.AddHook(nameHook(func(name string) {
		mu.Lock()
		defer mu.Unlock()
		sent[name]++
	}))
	p := newPipeline(t, rdb, Config{})
	sc := redis.NewScript("return 'ran ' .. ARGV[1]")
	ctx := context.Background()
	const n = 300
	ops := make([]*Op, n)
	results := make([]chan Result, n)
	for i := range ops {
		arg := strconv.Itoa(i)
		results[i] = make(chan Result, 1)
		ops[i] = &Op{Ctx: ctx, Key: "k", Script: sc, Finish: func(r Result) { results[i] <- r },
			Build: func(ctx context.Context, pp redis.Pipeliner) redis.Cmder {
				return sc.EvalSha(ctx, pp, []string{"k"}, arg)
			},
			Rebuild: func(ctx context.Context, pp redis.Pipeliner) redis.Cmder {
				return sc.Eval(ctx, pp, []string{"k"}, arg)
			},
		}
	}
	p.SendAll(ops)
	for i := range ops {
		if v, err := value(<-results[i]); err != nil || v != "ran "+strconv.Itoa(i) {
			t.Fatalf("op %d = %q, %v", i, v, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if sent["eval"] != 1 || sent["evalsha"] != 2*n-1 {
		t.Fatalf("sent %v; want %d evalsha (NOSCRIPT), then the source once (eval) and %d evalsha behind it", sent, n, n-1)
	}
}

// nameHook calls f with the name of each command a client sends, alone or
// in a pipeline, leaving out its connection's set-up (HELLO, CLIENT).
type nameHook func(name string)

func (h nameHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nameHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h nameHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.note(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h nameHook) note(cmd redis.Cmder) {
	if name := strings.ToLower(cmd.Name()); name != "hello" && name != "client" {
		h(name)
	}
}
