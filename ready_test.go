package corral_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Ready returns once the pub/sub mode is learnt (one probe, the warm-up's
// start.lua, on Prefix:probe), so a miss right after it sends no probe of
// its own; a second Ready sends nothing at all.
func TestReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rdb, f := e.faultyClient()
	var probes atomic.Int32
	f.setBefore(func(cmd redis.Cmder) error {
		if a := cmd.Args(); slices.Contains(a, any("corral:probe")) {
			probes.Add(1)
		}
		return nil
	})
	c := newCache(t, rdb, nil)
	ctx := context.Background()
	if err := c.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v; want nil", err)
	}
	if !corral.PubSubKnown(c) || probes.Load() != 1 {
		t.Fatalf("after Ready: mode known %v, %d probes sent; want known, by one probe", corral.PubSubKnown(c), probes.Load())
	}
	sent := f.commands.Load()
	if err := c.Ready(ctx); err != nil || f.commands.Load() != sent {
		t.Fatalf("a second Ready = %v, %d commands sent; want nil and none", err, f.commands.Load()-sent)
	}
	if v, err := c.Fetch(ctx, "k", time.Minute, value("v")); err != nil || string(v) != "v" || probes.Load() != 1 {
		t.Fatalf("Fetch after Ready = %q, %v, %d probes; want the value and no probe of its own", v, err, probes.Load())
	}
}

// Ready never waits past its context, and a Cache that is not ready still
// answers (failing open while Redis is away). Once Redis answers again, the
// next Ready is nil. Closed, it returns ErrClosed; a context already ended,
// its error.
func TestReady_RedisAway(t *testing.T) {
	t.Parallel()
	const slack = 500 * time.Millisecond
	ctx := context.Background()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		c := newCache(t, quickStartClient(t, refusingAddr(t)), nil)
		start := time.Now()
		err := c.Ready(ctx)
		if !redisAway(err) || time.Since(start) > corral.DefaultRedisTimeout+slack {
			t.Fatalf("Ready with nothing listening = %v after %v; want ErrCircuitOpen or ErrRedisTimeout within RedisTimeout", err, time.Since(start))
		}
		t.Logf("Ready = %v after %v", err, time.Since(start).Round(time.Millisecond))
		if v, err := c.Fetch(ctx, "k", time.Minute, value("v")); err != nil || string(v) != "v" {
			t.Fatalf("Fetch of a Cache not ready = %q, %v; want the value, failed open", v, err)
		}
	})
	t.Run("silent, then back", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		proxy := redistest.StartProxy(t, srv.Addr)
		proxy.Blackhole(true)
		c := newCache(t, quickStartClient(t, proxy.Addr), &corral.Options{RedisTimeout: 300 * time.Millisecond})
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := c.Ready(short); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 100*time.Millisecond+slack {
			t.Fatalf("Ready of a silent Redis = %v after %v; want context.DeadlineExceeded at its 100 ms deadline", err, time.Since(start))
		}
		if err := c.Ready(ctx); !redisAway(err) {
			t.Fatalf("Ready of a silent Redis without a deadline = %v; want ErrCircuitOpen or ErrRedisTimeout", err)
		}
		proxy.Blackhole(false)
		proxy.Reset()
		deadline := time.Now().Add(10 * time.Second)
		for err := c.Ready(ctx); err != nil; err = c.Ready(ctx) {
			if time.Now().After(deadline) {
				t.Fatalf("Ready 10 s after Redis answers again = %v; want nil", err)
			}
			<-time.After(50 * time.Millisecond) // a readiness probe's period
		}
		if !corral.PubSubKnown(c) {
			t.Fatal("Ready returned nil without the mode learnt")
		}
	})
	t.Run("ended context, closed Cache", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		done, cancel := context.WithCancel(ctx)
		cancel()
		if err := e.c.Ready(done); !errors.Is(err, context.Canceled) {
			t.Fatalf("Ready with a context ended = %v; want context.Canceled", err)
		}
		e.c.Close()
		if err := e.c.Ready(ctx); !errors.Is(err, corral.ErrClosed) {
			t.Fatalf("Ready after Close = %v; want ErrClosed", err)
		}
	})
}

// redisAway reports whether err says Redis could not be used: its circuit
// breaker open, or no answer within RedisTimeout.
func redisAway(err error) bool {
	return errors.Is(err, corral.ErrCircuitOpen) || errors.Is(err, corral.ErrRedisTimeout)
}
