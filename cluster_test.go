package corral_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// All of a key's Redis names share one Cluster slot, whatever the key looks
// like, so every script gets all its keys and never hits CROSSSLOT.
func TestClusterKeysShareASlot(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc := cl.Client()
	c := newCache(t, cc, nil)
	ctx := context.Background()
	for _, key := range []string{"user:{42}:p", "{a}{b}", "x{}y", "}z", "ключ", "ключ:{ü}", "bin\x00\xff{", "plain"} {
		v, err := c.Fetch(ctx, key, time.Minute, value("v:"+key))
		if err != nil || string(v) != "v:"+key {
			t.Fatalf("Fetch(%q) on a cluster = %q, %v", key, v, err)
		}
		slots := map[int64]bool{}
		tag := ""
		if i := strings.IndexByte(key, '{'); i >= 0 {
			if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
				tag = key[i+1 : i+1+j]
			}
		}
		entry := findEntry(t, cc, key)
		name := strings.TrimPrefix(entry, "corral:e:")
		for _, kind := range []string{"e", "l", "n"} {
			slot, err := cc.ClusterKeySlot(ctx, "corral:"+kind+":"+name).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = true
		}
		if len(slots) != 1 {
			t.Fatalf("names of %q span slots %v", key, slots)
		}
		if tag != "" { // a user's hash tag keeps its slot
			want, _ := cc.ClusterKeySlot(ctx, "{"+tag+"}").Result()
			if !slots[want] {
				t.Fatalf("%q: names in slots %v, the user's tag {%s} in %d", key, slots, tag, want)
			}
		}
	}
}

// findEntry returns the Redis name of key's entry, scanning every master.
func findEntry(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	var found string
	var mu sync.Mutex
	cc.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		keys, _ := m.Keys(ctx, "corral:e:*").Result()
		for _, k := range keys {
			if strings.HasSuffix(k, "}:"+key) {
				mu.Lock()
				found = k
				mu.Unlock()
			}
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no entry for %q", key)
	}
	return found
}

// A stampede on a 3-master cluster from several instances: one load per
// key, waiters woken by sharded notices on the nodes owning their keys, and
// at most one pub/sub connection per instance per node.
func TestClusterStampede(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		opts corral.Options
	}{{"sharded", corral.Options{}}, {"plain", corral.Options{DisableShardedPubSub: true}}} {
		// A waiter that hears no notice re-checks when the lease would
		// expire: a LeaseTTL of 30 s puts that fallback far beyond any
		// stampede a busy machine slows down, so finishing well before it
		// proves the notices woke the waiters.
		mode.opts.LeaseTTL = 30 * time.Second
		t.Run(mode.name, func(t *testing.T) {
			cl := redistest.StartCluster(t, 3, 0)
			const instances, goroutines, keys = 4, 25, 12
			caches := make([]*corral.Cache, instances)
			for i := range caches {
				caches[i] = newCache(t, cl.Client(), &mode.opts)
			}
			var loads [keys]atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			var bad atomic.Int32
			for _, c := range caches {
				for g := range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						k := g % keys
						<-start
						v, err := c.Fetch(context.Background(), "item:"+strconv.Itoa(k), time.Minute, func(ctx context.Context) ([]byte, error) {
							loads[k].Add(1)
							return slow(100*time.Millisecond, nil, "v"+strconv.Itoa(k))(ctx)
						})
						if err != nil || string(v) != "v"+strconv.Itoa(k) {
							bad.Add(1)
						}
					}()
				}
			}
			t0 := time.Now()
			close(start)
			wg.Wait()
			if bad.Load() != 0 {
				t.Fatalf("%d callers failed", bad.Load())
			}
			for k := range loads {
				if n := loads[k].Load(); n != 1 {
					t.Fatalf("key %d loaded %d times", k, n)
				}
			}
			// Woken by notices, not by the fallback re-check at the lease's
			// expiry.
			if took := time.Since(t0); took > mode.opts.LeaseTTL/2 {
				t.Fatalf("stampede took %v: the waiters were not woken by notices", took)
			}
			// Pub/sub connections: at most one per instance per node.
			ctx := context.Background()
			for _, n := range cl.Nodes {
				cli := redis.NewClient(&redis.Options{Addr: n.Addr})
				list, _ := cli.Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
				cli.Close()
				if conns := strings.Count(list, "\n"); conns > instances {
					t.Fatalf("node %s has %d pub/sub connections for %d instances", n.Addr, conns, instances)
				}
			}
		})
	}
}

// A waiter's shard channel moves with its slot (resharding): the node drops
// the subscription and corral subscribes again on the new owner, so the
// notice still wakes the waiter.
func TestClusterResharding(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	holder := newCache(t, cl.Client(), nil)
	waiter := newCache(t, cl.Client(), nil)
	ctx := context.Background()
	key := "{moving}"
	finish := hold(t, holder, key, []byte("v"), nil)
	got := make(chan string, 1)
	go func() {
		v, _ := waiter.Fetch(ctx, key, time.Minute, value("not me"))
		got <- string(v)
	}()
	eventually(t, 2*time.Second, "the waiter subscribed", func() bool { return waiter.Stats().Subscribes == 1 })
	from := cl.MasterOf(key)
	var to *redistest.Server
	for _, n := range cl.Nodes {
		if n != from {
			to = n
			break
		}
	}
	slot := int(cl.Client().ClusterKeySlot(ctx, key).Val())
	cl.MoveSlot(slot, from, to)
	eventually(t, 3*time.Second, "the waiter subscribed again on the new owner", func() bool {
		return waiter.Stats().Subscribes == 2
	})
	released := time.Now()
	finish()
	select {
	case v := <-got:
		if v != "v" || time.Since(released) > time.Second {
			t.Fatalf("waiter got %q %v after the load; want the notice, not the 5s timer", v, time.Since(released))
		}
	case <-time.After(6 * time.Second):
		t.Fatal("waiter hangs after resharding")
	}
}

// Sentinel: a failover client works, waiters included.
func TestSentinelSmoke(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	client := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Sentinel.Addr}})
		t.Cleanup(func() { c.Close() })
		return c
	}
	holder, waiter := newCache(t, client(), nil), newCache(t, client(), nil)
	ctx := context.Background()
	finish := hold(t, holder, "{s}", []byte("v"), nil)
	got := make(chan error, 1)
	go func() {
		v, err := waiter.Fetch(ctx, "{s}", time.Minute, value("not me"))
		if err == nil && string(v) != "v" {
			err = errors.New("wrong value " + string(v))
		}
		got <- err
	}()
	waitSubscribed(t, s.Master.Client(), "corral:n:{s}:{s}", 1)
	finish()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// clusterStampede runs one cold-key stampede per key over caches (each its
// own instance) x goroutines, and returns the loads per key and the Redis
// commands the instances sent.
func clusterStampede(tb testing.TB, caches []*corral.Cache, hooks []*faults, goroutines int, keys []string) (loads map[string]int32, commands int64) {
	commandsNow := func() (n int64) {
		for i, c := range caches {
			st := c.Stats()
			n += hooks[i].commands.Load() + int64(st.Subscribes+st.Unsubscribes)
		}
		return n
	}
	joinedAll := func() (n uint64) {
		for _, c := range caches {
			n += c.Stats().Joined
		}
		return n
	}
	// The load ends only once every goroutine has joined its instance's
	// flight: on a busy machine, goroutines that start late would otherwise
	// find the flight over and start one of their own (a hit).
	allJoined := joinedAll() + uint64(len(caches)*(goroutines-len(keys)))
	joined := func() {
		for deadline := time.Now().Add(30 * time.Second); joinedAll() < allJoined && time.Now().Before(deadline); {
			<-time.After(time.Millisecond)
		}
	}
	// Channels linger a second once their waiters leave (internal/notify):
	// each stampede counts its own unsubscriptions, sent after it ends,
	// and none of the one before.
	settled := func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); <-time.After(10 * time.Millisecond) {
			left := false
			for _, c := range caches {
				st := c.Stats()
				left = left || st.Subscribes != st.Unsubscribes
			}
			if !left {
				return
			}
		}
	}
	settled()
	before := commandsNow()
	var mu sync.Mutex
	loads = map[string]int32{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range caches {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := keys[g%len(keys)]
				<-start
				if _, err := c.Fetch(context.Background(), key, time.Minute, func(ctx context.Context) ([]byte, error) {
					mu.Lock()
					loads[key]++
					mu.Unlock()
					joined()
					return slow(50*time.Millisecond, nil, key)(ctx)
				}); err != nil {
					tb.Error(err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	settled()
	return loads, commandsNow() - before
}

// clusterInstances returns n instances on cl, each with its own cluster
// client, warmed up like those of a running fleet: slot map loaded,
// connections open, scripts known.
func clusterInstances(tb testing.TB, cl *redistest.Cluster, n int) ([]*corral.Cache, []*faults) {
	caches, hooks := make([]*corral.Cache, n), make([]*faults, n)
	for i := range caches {
		cc := cl.Client()
		// The stampede's loader waits up to 30 s for every goroutine to
		// join (clusterStampede): a LoadTimeout above that, so that a
		// starved machine's slow joining does not time the load out.
		c, err := corral.New(cc, &corral.Options{Logger: quiet, RedisTimeout: 2 * time.Second, LoadTimeout: time.Minute})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		if _, err := c.Fetch(context.Background(), "warm:"+strconv.Itoa(i), time.Minute, value("w")); err != nil {
			tb.Fatal(err)
		}
		hooks[i] = &faults{}
		cc.AddHook(hooks[i])
		caches[i] = c
	}
	return caches, hooks
}

// A simulated fleet of 64 instances x 50 goroutines over the cluster: one
// load per key, and Redis commands that grow with instances, not goroutines.
func TestClusterScale(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	const instances = 64
	caches, hooks := clusterInstances(t, cl, instances)
	keys := []string{"scale:a", "scale:b", "scale:c", "scale:d"}
	loads, commands := clusterStampede(t, caches, hooks, 50, keys)
	checkScaleLoads(t, caches, loads, keys, "50 goroutines")
	// Per instance and key: fetch, subscribe, fetch, unsubscribe; a caller
	// arriving after its instance's flight ended adds a fetch (a hit).
	bound := int64(instances * (4 + 1) * len(keys))
	if commands > bound {
		t.Fatalf("%d commands for %d instances x %d keys; want at most %d", commands, instances, len(keys), bound)
	}
	// Ten times the goroutines, keys afresh: the same bound holds.
	keys2 := []string{"scale:e", "scale:f", "scale:g", "scale:h"}
	loads2, commands10 := clusterStampede(t, caches, hooks, 500, keys2)
	checkScaleLoads(t, caches, loads2, keys2, "500 goroutines")
	if commands10 > bound || commands10 > 2*commands {
		t.Fatalf("commands grew with goroutines: %d at 50 a instance, %d at 500 (bound %d); loads %v", commands, commands10, bound, loads2)
	}
	t.Logf("64 instances: %d commands at 50 goroutines each, %d at 500", commands, commands10)
}

// checkScaleLoads fails t unless each key was loaded once, but for what
// the product allows on a machine so starved that the Cluster's own nodes
// stay silent past RedisTimeout (64 instances x 500 goroutines under -race
// beside other work): an instance whose breaker opened fails open, and
// loads each key once itself (a fail-open load is shared per process); a
// holder starved past LeaseTTL lets one more load begin. On a machine with
// CPU to spare, neither happens and each key loads once.
func checkScaleLoads(t *testing.T, caches []*corral.Cache, loads map[string]int32, keys []string, what string) {
	t.Helper()
	failedOpen, lost := failedOpen(caches), int(leasesLost(caches))
	for _, k := range keys {
		if n := int(loads[k]); n < 1 || n > 1+failedOpen+lost {
			t.Fatalf("loads %v at %s, %d instances failed open, %d leases lost; want 1 per key, and one more at most per such instance or lease",
				loads, what, failedOpen, lost)
		}
	}
	if failedOpen+lost > 0 {
		t.Logf("loads %v at %s: %d instances failed open (Redis silent past RedisTimeout), %d leases lost", loads, what, failedOpen, lost)
	}
}

// BenchmarkClusterStampede reports Redis commands per cold-key stampede on
// a 3-master cluster, per instance: they depend on instances, not on
// goroutines.
func BenchmarkClusterStampede(b *testing.B) {
	cl := redistest.StartCluster(b, 3, 0)
	for _, size := range []struct{ instances, goroutines int }{{16, 10}, {16, 50}, {64, 10}, {64, 50}} {
		b.Run(strconv.Itoa(size.instances)+"x"+strconv.Itoa(size.goroutines), func(b *testing.B) {
			caches, hooks := clusterInstances(b, cl, size.instances)
			var total int64
			var maxLoads int32
			for i := range b.N {
				key := "bench:cs:" + strconv.Itoa(size.instances) + ":" + strconv.Itoa(size.goroutines) + ":" + strconv.Itoa(i)
				loads, commands := clusterStampede(b, caches, hooks, size.goroutines, []string{key})
				total += commands
				maxLoads = max(maxLoads, loads[key])
			}
			b.ReportMetric(float64(total)/float64(b.N), "redis-cmds/op")
			b.ReportMetric(float64(total)/float64(b.N)/float64(size.instances), "cmds/instance")
			b.ReportMetric(float64(maxLoads), "max-loads")
		})
	}
}

// Values up to MaxValueBytes work on a Cluster too: a cold 16 MiB value,
// 4 instances x 5 goroutines, one load; and one over a lowered limit is
// served to its callers without being stored.
func TestClusterBigValue(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	want := bigValue(16 << 20)
	var loads atomic.Int32
	var wg sync.WaitGroup
	caches := make([]*corral.Cache, 4)
	for i := range caches {
		caches[i] = newCache(t, cl.Client(), &corral.Options{MaxValueBytes: 32 << 20})
	}
	for _, c := range caches {
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := c.Fetch(ctx, "cluster:big", time.Minute, func(context.Context) ([]byte, error) {
					loads.Add(1)
					return want, nil
				})
				if err != nil || !bytes.Equal(v, want) {
					t.Errorf("Fetch = %d bytes, %v", len(v), err)
				}
			}()
		}
	}
	wg.Wait()
	if loads.Load() != 1 {
		t.Fatalf("%d loads of a 16 MiB value on a Cluster; want 1", loads.Load())
	}
	noFailOpen(t, caches)
	tooBig := bigValue(33 << 20)
	if v, err := caches[0].Fetch(ctx, "cluster:huge", time.Minute, func(context.Context) ([]byte, error) { return tooBig, nil }); err != nil || len(v) != len(tooBig) {
		t.Fatalf("Fetch over MaxValueBytes = %d bytes, %v", len(v), err)
	}
	if _, err := caches[1].Get(ctx, "cluster:huge"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get of a value over MaxValueBytes = %v; want ErrMiss", err)
	}
}
