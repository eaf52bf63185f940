package corral_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// New starts, in the background, what the first calls would otherwise do on
// their way: the pub/sub probe, then the rights and eviction-policy checks.
// The first miss then finds the mode known and sends no probe of its own.
func TestNew_WarmsUpInTheBackground(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	var mu sync.Mutex
	var sent []string // command names, in order
	f := &faults{}
	f.setBefore(func(cmd redis.Cmder) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, strings.ToLower(cmd.Name()))
		return nil
	})
	rdb.AddHook(f)
	names := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sent)
	}
	c := newCache(t, rdb, nil)

	if !testkit.Within(10*time.Second, time.Millisecond, func() bool {
		return slices.Contains(names(), "spublish") && slices.Contains(names(), "config")
	}) {
		t.Fatalf("no pub/sub probe and CONFIG GET 10s after New, without a call: sent %v", names())
	}
	before := len(names())
	v, err := c.Fetch(context.Background(), "k", time.Minute, value("v"))
	if err != nil || string(v) != "v" {
		t.Fatalf("Fetch = %q, %v", v, err)
	}
	for _, name := range names()[before:] {
		if name == "spublish" || name == "publish" || name == "config" {
			t.Errorf("the first miss sent %s: its checks should have been done since New (sent %v)", name, names()[before:])
		}
	}
}

// A Cache made while Redis is down still works once Redis is back: the
// warm-up's failure leaves the probe and the checks to the first calls.
func TestNew_WarmUpWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	proxy.Blackhole(true)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, DialTimeout: 100 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	opts := failOpts()
	c := newCache(t, rdb, opts)
	ctx := context.Background()
	// While Redis is silent, a miss fails open: the loader's value, no error.
	if v, err := c.Fetch(ctx, "k", time.Minute, value("v1")); err != nil || string(v) != "v1" {
		t.Fatalf("Fetch while Redis is silent = %q, %v", v, err)
	}
	proxy.Blackhole(false)
	// Polled every 10 ms: the breaker's cooldown passes meanwhile.
	testkit.EventuallyEvery(t, 20*time.Second, 10*time.Millisecond, "something stored after Redis came back", func() bool {
		v, err := c.Fetch(ctx, "k2", time.Minute, value("v2"))
		if err != nil || string(v) != "v2" {
			t.Fatalf("Fetch = %q, %v", v, err)
		}
		got, err := c.Get(ctx, "k2")
		return err == nil && string(got) == "v2" // stored: the probe and the fetch ran once Redis was back
	})
}
