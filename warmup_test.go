package corral_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// On one server, New sends no command: its warm-up only opens the pub/sub
// connection (connection set-up), and the first peek carries start.lua
// (the pub/sub mode, the rights, the eviction policy). The Cache's start
// then costs no command of its own: no probe, no rights script, no CONFIG
// GET, ever.
func TestNew_StartsWithItsFirstPeek(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	rdb := srv.Client()
	rec := recordNames(rdb)
	var logged testkit.Buffer
	c := newCache(t, rdb, &corral.Options{Logger: slogTo(&logged)})
	<-corral.WarmedUp(c)
	if sent := commandsSent(rec.names()); len(sent) != 0 {
		t.Fatalf("New's warm-up sent %v; want connection set-up alone", sent)
	}
	v, err := c.Fetch(context.Background(), "k", time.Minute, value("v"))
	if err != nil || string(v) != "v" {
		t.Fatalf("Fetch = %q, %v", v, err)
	}
	if sent := commandsSent(rec.names()); len(sent) == 0 || sent[0] != "start" {
		t.Fatalf("the first Fetch sent %v; want its peek, carrying start.lua, first", sent)
	}
	c.Close() // waits for the checks
	for _, name := range rec.names() {
		if name == "spublish" || name == "publish" || name == "config" {
			t.Errorf("sent %s: the first peek's start.lua learnt the mode and the policy (sent %v)", name, rec.names())
		}
	}
	if log := logged.String(); strings.Count(log, "Redis may evict corral's keys") != 1 || !strings.Contains(log, "maxmemory-policy=allkeys-lru") {
		t.Fatalf("want one eviction-policy warning, read by the first peek:\n%s", log)
	}
}

// On a Cluster (no folded peek) New starts, in the background, what the
// first calls would otherwise do on their way: start.lua, then CONFIG GET
// of each master. The first miss then finds the mode known and sends no
// probe of its own.
func TestNew_WarmsUpInTheBackground(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	rec := &names{}
	rdb := cl.Client(func(o *redis.ClusterOptions) {
		o.NewClient = func(o *redis.Options) *redis.Client { // the nodes' clients, which send corral's commands
			node := redis.NewClient(o)
			rec.hook(node)
			return node
		}
	})
	c := newCache(t, rdb, nil)
	if !testkit.Within(10*time.Second, time.Millisecond, func() bool {
		return slices.Contains(rec.names(), "start") && slices.Contains(rec.names(), "config")
	}) {
		t.Fatalf("no start.lua and CONFIG GET 10s after New, without a call: sent %v", rec.names())
	}
	before := len(rec.names())
	v, err := c.Fetch(context.Background(), "k", time.Minute, value("v"))
	if err != nil || string(v) != "v" {
		t.Fatalf("Fetch = %q, %v", v, err)
	}
	for _, name := range rec.names()[before:] {
		if name == "spublish" || name == "publish" || name == "start" {
			t.Errorf("the first miss sent %s: its checks should have been done since New (sent %v)", name, rec.names()[before:])
		}
	}
}

// names records the names of the commands a client sends, in order
// ("start" for a script on Prefix:probe: start.lua, on its own or carried
// by a peek).
type names struct {
	mu   sync.Mutex
	sent []string
}

// recordNames hooks rdb, and returns its record.
func recordNames(rdb redis.UniversalClient) *names {
	n := &names{}
	n.hook(rdb)
	return n
}

// hook records the commands rdb sends.
func (n *names) hook(rdb redis.UniversalClient) {
	f := &faults{}
	f.setBefore(func(cmd redis.Cmder) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		name := strings.ToLower(cmd.Name())
		if slices.Contains(cmd.Args(), any("corral:probe")) {
			name = "start"
		}
		n.sent = append(n.sent, name)
		return nil
	})
	rdb.AddHook(f)
}

// commandsSent are sent without connection set-up (HELLO, CLIENT SETINFO, AUTH):
// a pub/sub connection may be dialled at any time.
func commandsSent(sent []string) []string {
	return slices.DeleteFunc(sent, func(name string) bool { return name == "hello" || name == "client" || name == "auth" })
}

func (n *names) names() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.sent)
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
