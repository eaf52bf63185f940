package corral_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
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

	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(names(), "spublish") || !slices.Contains(names(), "config") {
		if time.Now().After(deadline) {
			t.Fatalf("no pub/sub probe and CONFIG GET 10s after New, without a call: sent %v", names())
		}
		time.Sleep(time.Millisecond) // polling with a deadline
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := c.Fetch(ctx, "k2", time.Minute, value("v2"))
		if err != nil || string(v) != "v2" {
			t.Fatalf("Fetch = %q, %v", v, err)
		}
		if got, err := c.Get(ctx, "k2"); err == nil && string(got) == "v2" {
			break // stored: the probe and the fetch ran once Redis was back
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing stored 20s after Redis came back")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline (the breaker's cooldown)
	}
}
