package transport

import (
	"context"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A batch of one command goes alone, on the client's main pool, whose
// connection a client that has connected holds already; a longer batch is
// a pipeline, on go-redis's pipeline pool (docs/design.md, section 4.1).
// A script's error reply, and NOSCRIPT, are still the command's own.
func TestOneCommandOnTheMainPool(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil { // the main pool's connection
		t.Fatal(err)
	}
	p := newPipeline(t, rdb, Config{})
	pipelined := func() uint32 {
		if s := rdb.PoolStats().PipelineStats; s != nil {
			return s.TotalConns
		}
		return 0
	}

	script := redis.NewScript(`return ARGV[1]`) // not loaded: NOSCRIPT, then EVAL
	op := func() *Op {
		return &Op{Ctx: ctx, Key: "k", Script: script,
			Build: func(ctx context.Context, pl redis.Pipeliner) redis.Cmder {
				return script.EvalSha(ctx, pl, []string{"k"}, "v")
			},
			Rebuild: func(ctx context.Context, pl redis.Pipeliner) redis.Cmder {
				return script.Eval(ctx, pl, []string{"k"}, "v")
			},
		}
	}
	r := p.Do(op())
	if r.Err != nil || r.Cmd.(*redis.Cmd).Val() != "v" {
		t.Fatalf("one script: %v, %v", r.Err, r.Cmd)
	}
	if n := pipelined(); n != 0 {
		t.Fatalf("one command dialled %d pipeline connections; want it on the main pool", n)
	}
	if st := rdb.PoolStats(); st.TotalConns != 1 {
		t.Fatalf("main pool: %d connections; want the one the PING made, reused", st.TotalConns)
	}

	failing := redis.NewScript(`return redis.error_reply('ERR boom')`)
	r = p.Do(&Op{Ctx: ctx, Key: "k", Script: failing,
		Build: func(ctx context.Context, pl redis.Pipeliner) redis.Cmder {
			return failing.EvalSha(ctx, pl, []string{"k"})
		},
		Rebuild: func(ctx context.Context, pl redis.Pipeliner) redis.Cmder { return failing.Eval(ctx, pl, []string{"k"}) },
	})
	if r.Err != nil || r.Cmd.Err() == nil || r.Cmd.Err().Error() != "ERR boom" {
		t.Fatalf("an error reply: %v, %v; want the command's own", r.Err, r.Cmd.Err())
	}

	done := make(chan Result, 2)
	ops := []*Op{op(), op()}
	for _, o := range ops {
		o.Finish = func(r Result) { done <- r }
	}
	p.SendAll(ops)
	for range ops {
		if r := <-done; r.Err != nil || r.Cmd.(*redis.Cmd).Val() != "v" {
			t.Fatalf("a batch of two: %v, %v", r.Err, r.Cmd)
		}
	}
	if n := pipelined(); n == 0 {
		t.Fatal("a batch of two went as no pipeline")
	}
}

// A one-command batch refused at the connection's set-up (WRONGPASS) fails
// as a batch does, not as the command's reply: Process sets the command's
// error either way, and only the class tells them apart.
func TestOneCommandRefusedAtSetUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := srv.Client().Do(context.Background(), "ACL", "SETUSER", "app", "on", ">right", "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(func(o *redis.Options) { o.Username, o.Password = "app", "wrong" })
	p := newPipeline(t, rdb, Config{})
	r := p.Do(get(context.Background(), "k"))
	if r.Err == nil || !Says(r.Err, AuthRefused) {
		t.Fatalf("Do = %v, %v; want the exchange failed, WRONGPASS", r.Err, r.Cmd)
	}
}
