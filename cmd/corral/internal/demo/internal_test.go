package demo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCommandCounter checks that the hook counts every command, those of
// pipelines and transactions one by one, and leaves out the connection
// set-up go-redis does on dial (HELLO, CLIENT SETINFO).
func TestCommandCounter(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rs, err := openRedis(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	c, n := rs.newClient()
	defer c.Close()

	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET: %v", err)
	}
	if got := n.Load(); got != 1 {
		t.Fatalf("after a GET on a new connection: %d commands, want 1", got)
	}
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k", "v", time.Minute)
		p.Get(ctx, "k")
		p.Del(ctx, "k")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 4 {
		t.Fatalf("after a pipeline of 3: %d commands, want 4", got)
	}
}

// TestSeedRecipeGivesUp checks that the recipe's unbounded retry ends with
// the run's context, as an error, when the lock is never released.
func TestSeedRecipeGivesUp(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rs, err := openRedis(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	c, n := rs.newClient()
	defer c.Close()
	inst, err := seedRecipe{}.NewInstance(Env{Redis: c, Namespace: "t:", TTL: time.Minute,
		Load: func(context.Context, string) ([]byte, error) {
			t.Error("the recipe loaded without the lock")
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := c.Set(ctx, "lock:t:k", 1, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	before := n.Load()
	rctx, cancel := context.WithTimeout(ctx, 350*time.Millisecond)
	defer cancel()
	_, err = inst.Fetch(rctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch = %v, want the context's deadline", err)
	}
	if got := n.Load() - before; got < 4 {
		t.Errorf("%d commands while polling for 350ms, want at least 4 (GET + SET NX per 100ms poll)", got)
	}
}

func TestSummarize(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- {
		lat = append(lat, time.Duration(i)*time.Millisecond+40*time.Microsecond)
	}
	got := summarize(lat)
	want := Latency{P50: 50, P99: 99, Max: 100}
	if got != want {
		t.Fatalf("summarize = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Latency{}) {
		t.Fatalf("summarize(nil) = %+v, want zeros", got)
	}
}

func TestHotKeysDistinct(t *testing.T) {
	seen := make(map[int64]bool)
	for _, k := range hotKeys(customers) {
		if k.customer < 1 || k.customer > customers || seen[k.customer] {
			t.Fatalf("hot key %+v repeats or is out of range", k)
		}
		seen[k.customer] = true
	}
}

// TestScenarioDefaults checks the settings left to the scenario: the TTL
// and corral's stale window, unless given.
func TestScenarioDefaults(t *testing.T) {
	for _, tc := range []struct {
		scenario           string
		ttl                time.Duration
		stale              *time.Duration
		wantTTL, wantStale time.Duration
	}{
		{"stampede", 0, nil, DefaultTTL, 0},
		{"stampede", 0, new(3 * time.Second), DefaultTTL, 3 * time.Second},
		{"expiry", 0, nil, DefaultExpiryTTL, DefaultExpiryTTL},
		{"expiry", 2 * time.Second, nil, 2 * time.Second, 2 * time.Second}, // the stale window follows the TTL
		{"expiry", 0, new(time.Duration(0)), DefaultExpiryTTL, 0},          // an explicit 0 turns it off
	} {
		cfg := DefaultConfig()
		cfg.Scenario, cfg.TTL, cfg.StaleTTL = tc.scenario, tc.ttl, tc.stale
		got, sc, err := cfg.resolve()
		if err != nil {
			t.Fatalf("%s: %v", tc.scenario, err)
		}
		if sc.Name() != tc.scenario || got.TTL != tc.wantTTL || *got.StaleTTL != tc.wantStale {
			t.Errorf("%s, TTL %v, stale %v: resolved to %s, TTL %v, stale %v; want TTL %v, stale %v",
				tc.scenario, tc.ttl, tc.stale, sc.Name(), got.TTL, *got.StaleTTL, tc.wantTTL, tc.wantStale)
		}
	}
}
