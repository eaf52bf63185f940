package transport

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// namesSent returns a client of a new server, and sent: how many commands
// of each name it sent so far (reset: and forget them).
func namesSent(t *testing.T) (*redis.Client, func(reset bool) map[string]int) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	var mu sync.Mutex
	names := map[string]int{}
	rdb.AddHook(nameHook(func(name string) {
		mu.Lock()
		defer mu.Unlock()
		names[name]++
	}))
	return rdb, func(reset bool) map[string]int {
		mu.Lock()
		defer mu.Unlock()
		got := maps.Clone(names)
		if reset {
			clear(names)
		}
		return got
	}
}

// failingCarrier returns an op that was to carry the clock (Clocked) and
// fails with an error reply (the script's own, as NOPERM or BUSY would),
// its script loaded on rdb already; done gets its result.
func failingCarrier(t *testing.T, rdb *redis.Client, done func(Result)) *Op {
	ctx := context.Background()
	failing := redis.NewScript(`return redis.error_reply('ERR boom')`)
	if err := failing.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	return &Op{Ctx: ctx, Key: "k", Script: failing, Finish: done,
		Build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return failing.EvalSha(ctx, p, []string{"k"})
		},
		Rebuild: func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return failing.Eval(ctx, p, []string{"k"}) },
		Clocked: func(redis.Cmder) (time.Time, bool) { return time.Time{}, false },
	}
}

// clockScript replies with the server's clock in microseconds, as the
// records' read.lua does.
var clockScript = redis.NewScript(`local t = redis.call('TIME') return t[1] * 1000000 + t[2]`)

// clockedOp runs clockScript; its Clocked reads the clock from the reply.
func clockedOp(ctx context.Context, done func(Result)) *Op {
	return &Op{Ctx: ctx, Key: "k", Script: clockScript, Finish: done,
		Build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return clockScript.EvalSha(ctx, p, []string{"k"})
		},
		Rebuild: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return clockScript.Eval(ctx, p, []string{"k"})
		},
		Clocked: func(cmd redis.Cmder) (time.Time, bool) {
			us, err := cmd.(*redis.Cmd).Int64()
			return time.UnixMicro(us), err == nil
		},
	}
}

// An op that needs the clock (a peek) sent behind one whose reply carries
// it (the records' read) costs no TIME, and gets that clock; when that op
// fails (here NOSCRIPT, the script not loaded yet), the op needing the
// clock is sent again with a TIME of its own, never answered without one.
func TestClockedOpSavesTime(t *testing.T) {
	t.Parallel()
	rdb, sent := namesSent(t)
	p := newPipeline(t, rdb, Config{})
	ctx := context.Background()
	for round, want := range []map[string]int{
		{"evalsha": 1, "eval": 1, "get": 2, "time": 1}, // NOSCRIPT: both sent again, the script with its source, the GET with TIME
		{"evalsha": 1, "get": 1},                       // the script loaded: no TIME
	} {
		sent(true)
		res := make(chan Result, 2)
		before := time.Now()
		g := get(ctx, "k")
		g.Clock, g.Finish = true, func(r Result) { res <- r }
		p.SendAll([]*Op{clockedOp(ctx, func(r Result) { res <- r }), g})
		for range 2 {
			r := <-res
			if r.Err != nil || r.Cmd.Err() != nil && r.Cmd.Err() != redis.Nil {
				t.Fatalf("round %d: %v, %v", round, r.Err, r.Cmd.Err())
			}
			if r.Cmd.Name() == "get" && (r.Now < before.UnixMilli()-1000 || r.Now > time.Now().UnixMilli()+1000) {
				t.Fatalf("round %d: the GET's clock is %d, not about now (%d)", round, r.Now, time.Now().UnixMilli())
			}
		}
		if got := sent(false); len(got) != len(want) || !maps.Equal(got, want) {
			t.Fatalf("round %d: sent %v; want %v", round, got, want)
		}
	}
}

// When the op that was to carry the clock fails otherwise (an error reply:
// here the script's own, as NOPERM or BUSY would be), the op needing the
// clock is sent again once, with a TIME of its own.
func TestClockedOpFailsThenTime(t *testing.T) {
	t.Parallel()
	rdb, sent := namesSent(t)
	p := newPipeline(t, rdb, Config{})
	ctx := context.Background()
	res := make(chan Result, 2)
	bad := failingCarrier(t, rdb, func(r Result) { res <- r })
	sent(true)
	g := get(ctx, "k")
	g.Clock, g.Finish = true, func(r Result) { res <- r }
	p.SendAll([]*Op{bad, g})
	for range 2 {
		r := <-res
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Cmd.Name() == "get" && r.Now <= 0 {
			t.Fatalf("the GET was answered without a clock (Now %d)", r.Now)
		}
	}
	if got, want := sent(false), map[string]int{"evalsha": 1, "get": 2, "time": 1}; !maps.Equal(got, want) {
		t.Fatalf("sent %v; want %v", got, want)
	}
}

// An op already sent again for want of a clock gets a TIME however its
// batch is made: behind a carrier that fails again and a fresh op needing
// the clock, it is not sent a third time.
func TestClockedOpTimedBehindUntimed(t *testing.T) {
	t.Parallel()
	rdb, sent := namesSent(t)
	p := newPipeline(t, rdb, Config{})
	ctx := context.Background()
	res := make(chan Result, 3)
	bad := failingCarrier(t, rdb, func(r Result) { res <- r })
	sent(true)
	fresh, old := get(ctx, "k"), get(ctx, "k")
	fresh.Clock, fresh.Finish = true, func(r Result) { res <- r }
	old.Clock, old.Finish, old.timed = true, func(r Result) { res <- r }, true
	p.SendAll([]*Op{bad, fresh, old})
	for range 3 {
		if r := <-res; r.Err != nil || r.Cmd.Name() == "get" && r.Now <= 0 {
			t.Fatalf("%v, now %d", r.Err, r.Now)
		}
	}
	if got := sent(false); got["get"] != 2 || got["time"] != 1 {
		t.Fatalf("sent %v; want each GET once, behind one TIME", got)
	}
}
