package corral_test

import (
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
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Failover during a stampede (CLUSTER FAILOVER, or a killed master): callers
// still get values, nothing hangs, and loads stay bounded: at most one per
// instance per key (each instance fails open at most once while its calls
// fail) plus the one of the lease protocol.
func TestClusterFailoverDuringStampede(t *testing.T) {
	for _, how := range []string{"CLUSTER FAILOVER", "master killed"} {
		t.Run(how, func(t *testing.T) {
			cl := redistest.StartCluster(t, 3, 1)
			const instances, goroutines = 4, 25
			key := "{fo}"
			caches := make([]*corral.Cache, instances)
			for i := range caches {
				caches[i] = newCache(t, cl.Client(), nil) // default options: LeaseTTL 5s
			}
			master := cl.MasterOf(key)
			replica := cl.ReplicaOf(master)
			var loads atomic.Int32
			loading := make(chan struct{}, 1)
			load := func(ctx context.Context) ([]byte, error) {
				loads.Add(1)
				select {
				case loading <- struct{}{}:
				default:
				}
				return slow(500*time.Millisecond, nil, "v")(ctx)
			}
			var wg sync.WaitGroup
			var bad atomic.Int32
			var slowest atomic.Int64
			for _, c := range caches {
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
						defer cancel()
						t0 := time.Now()
						if v, err := c.Fetch(cctx, key, time.Minute, load); err != nil || string(v) != "v" {
							if bad.Add(1) <= 3 {
								t.Errorf("caller: %q, %v", v, err)
							}
						}
						for d := int64(time.Since(t0)); ; {
							if old := slowest.Load(); d <= old || slowest.CompareAndSwap(old, d) {
								break
							}
						}
					}()
				}
			}
			<-loading
			if how == "master killed" {
				cl.WaitReplicated(master) // the lease is on the replica that takes over
				master.Kill()
			} else {
				cl.Failover(replica)
			}
			wg.Wait()
			// New callers fail open at once; waiters hear the holder's commit
			// once the replica took over, or give up on it when its lease
			// (LeaseTTL 5s) would have expired. None waits longer.
			if d := time.Duration(slowest.Load()); d > 5*time.Second+slack {
				t.Fatalf("%s: the slowest caller took %v", how, d)
			}
			t.Logf("%s: slowest caller %v", how, time.Duration(slowest.Load()).Round(time.Millisecond))
			if n := loads.Load(); n > instances+1 {
				t.Fatalf("%d loads for %d instances during a failover; want at most %d", n, instances, instances+1)
			}
			if how == "master killed" {
				cl.WaitHealthy()
			}
			// Afterwards the key is cached again on the new master.
			var lastErr error
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, ferr := caches[0].Fetch(context.Background(), key, time.Minute, value("v"))
				v, err := caches[1].Get(context.Background(), key)
				if err == nil && string(v) == "v" {
					break
				}
				lastErr = errors.Join(ferr, err)
				if time.Now().After(deadline) {
					t.Fatalf("caching does not work after the failover: %v; stats %+v", lastErr, caches[0].Stats())
				}
				<-time.After(50 * time.Millisecond) // polling for recovery, bounded by the deadline
			}
			t.Logf("%s: %d loads", how, loads.Load())
		})
	}
}

// Waiters subscribed on a master that dies: once a replica takes over, the
// waiters' channels move to it and they hear the lease holder's notice,
// rather than sit out their LeaseTTL timers.
func TestClusterWaitersFollowAFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	key := "{fw}"
	// A LeaseTTL longer than the test: no waiter's timer fires, so only the
	// notice can wake them.
	opts := func() *corral.Options { return &corral.Options{LeaseTTL: 30 * time.Second} }
	holder := newCache(t, cl.Client(), opts())
	const instances, goroutines = 3, 10
	var loads atomic.Int32
	finish := hold(t, holder, key, []byte("v"), nil)
	var wg sync.WaitGroup
	type result struct {
		v    string
		err  error
		when time.Time
	}
	results := make(chan result, instances*goroutines)
	for range instances {
		c := newCache(t, cl.Client(), opts())
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				v, err := c.Fetch(cctx, key, time.Minute, slow(0, &loads, "mine"))
				results <- result{string(v), err, time.Now()}
			}()
		}
	}
	master := cl.MasterOf(key)
	waitSubscribed(t, redis.NewClient(&redis.Options{Addr: master.Addr}), "corral:n:{fw}:{fw}", instances)
	cl.WaitReplicated(master) // the lease is on the replica that takes over
	master.Kill()
	cl.WaitHealthy() // the replica took over
	committed := time.Now()
	finish()
	wg.Wait()
	close(results)
	var last time.Time
	for r := range results {
		if r.err != nil || r.v != "v" {
			t.Fatalf("waiter got %q, %v; want the holder's value", r.v, r.err)
		}
		if r.when.After(last) {
			last = r.when
		}
	}
	if took := last.Sub(committed); took > 3*time.Second || loads.Load() != 0 {
		t.Fatalf("waiters answered %v after the commit with %d loads of their own; want the notice, no reloads", took, loads.Load())
	}
	t.Logf("waiters answered %v after the commit", last.Sub(committed).Round(time.Millisecond))
}

// A pub/sub connection to a Cluster node drops while it carries channels of
// several slots. go-redis re-subscribes them all in one SSUBSCRIBE, which the
// node refuses (CROSSSLOT). When the waiters' timers fire, they re-check,
// subscribe their channels again one by one, and hear the notices that end
// the loads. Heard, not found by their next timer: the timers fire every
// LeaseTTL and a quarter (3.75 s here), so waiters answered within 2 s of
// the release heard the notice (about a millisecond on a quiet machine,
// logged; 477 ms once on a busy one, where the bound was 300 ms).
func TestClusterPubSubReconnect(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	opts := func() *corral.Options { return &corral.Options{LeaseTTL: 3 * time.Second} }
	holder := newCache(t, cl.Client(), opts())
	waiter := newCache(t, cl.Client(), opts())
	ctx := context.Background()
	// Three keys in three slots of one node.
	node := cl.MasterOf("{p0}")
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		k := "{p" + strconv.Itoa(i) + "}"
		if cl.MasterOf(k) == node {
			keys = append(keys, k)
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: node.Addr})
	t.Cleanup(func() { admin.Close() })
	round := func(kill bool, within time.Duration) {
		t.Helper()
		finishes := make([]func(), len(keys))
		got := make(chan string, len(keys))
		for i, k := range keys {
			finishes[i] = hold(t, holder, k, []byte("v"+k), nil)
			go func() {
				v, _ := waiter.Fetch(ctx, k, time.Minute, value("not me"))
				got <- string(v)
			}()
			waitSubscribed(t, admin, "corral:n:"+k+":"+k, 1)
		}
		if kill {
			admin.ClientKillByFilter(ctx, "TYPE", "pubsub")
			// Past the waiters' timers (LeaseTTL and a quarter): they re-check,
			// find the loads still running, and subscribe again.
			<-time.After(4500 * time.Millisecond)
		}
		released := time.Now()
		for _, f := range finishes {
			f()
		}
		for range keys {
			select {
			case v := <-got:
				if !strings.HasPrefix(v, "v{p") {
					t.Fatalf("waiter got %q", v)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("waiter hangs")
			}
		}
		took := time.Since(released)
		if took > within {
			t.Fatalf("waiters took %v, want within %v: the notice, not their timers", took, within)
		}
		t.Logf("waiters answered %v after the release", took.Round(time.Millisecond))
		for _, k := range keys {
			waiter.Delete(ctx, k)
		}
	}
	round(true, 2*time.Second)  // heard again after the re-subscription
	round(false, 2*time.Second) // and on later waits
}

// One master of a 3-master Cluster (no replicas) is killed: only its keys
// are affected. They are answered from memory or fail open, at most once
// per instance; the other masters' keys are read from Redis as before; a
// Delete of a dead master's key is queued and applied once that master is
// back, and another instance then loads the new value.
func TestClusterOutage_OneMasterDown(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	a := newCache(t, cl.Client(), &corral.Options{Logger: testLogger(t)})
	b := newCache(t, cl.Client(), &corral.Options{Logger: quiet})
	ctx := context.Background()
	down := cl.MasterOf(wire.EntryName("corral", "{down}"))
	up := "{up0}"
	for i := 0; cl.MasterOf(wire.EntryName("corral", up)) == down; i++ {
		up = "{up" + strconv.Itoa(i+1) + "}"
	}
	var origin versioned
	origin.version.Store(1)
	for _, c := range []*corral.Cache{a, b} {
		for _, k := range []string{"{down}", up} {
			if v, err := c.Fetch(ctx, k, time.Hour, origin.load(nil)); err != nil || string(v) != "v1" {
				t.Fatalf("warm-up of %s: %q, %v", k, v, err)
			}
		}
	}
	down.Kill()
	var loads atomic.Int32
	hits := a.Stats().Hits
	for range 50 {
		if v, err := a.Fetch(ctx, up, time.Hour, origin.load(&loads)); err != nil || string(v) != "v1" {
			t.Fatalf("a live master's key: %q, %v", v, err)
		}
		if v, err := a.Fetch(ctx, "{down}", time.Hour, origin.load(&loads)); err != nil || string(v) != "v1" {
			t.Fatalf("the dead master's key: %q, %v", v, err)
		}
	}
	if n := loads.Load(); n > 1 || a.Stats().Hits-hits < 50 {
		t.Fatalf("%d loads, %d hits; want the live master's key from Redis, the other loaded once at most", n, a.Stats().Hits-hits)
	}
	origin.version.Store(2)
	if err := a.Delete(ctx, "{down}"); err == nil || !strings.Contains(err.Error(), "queued") {
		t.Fatalf("Delete of the dead master's key = %v; want its error, queued", err)
	}
	if err := a.Delete(ctx, up); err != nil {
		t.Fatalf("Delete of a live master's key = %v", err)
	}
	if err := down.Restart(); err != nil {
		t.Fatal(err)
	}
	cl.WaitHealthy()
	eventually(t, 10*time.Second, "the queued Delete reaches the master once it is back", func() bool {
		return a.Stats().InvalidationsReplayed == 1
	})
	if v, err := b.Fetch(ctx, "{down}", time.Hour, origin.load(nil)); err != nil || string(v) != "v2" {
		t.Fatalf("the other instance after the heal: %q, %v; want v2", v, err)
	}
}
