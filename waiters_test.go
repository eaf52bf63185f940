package corral_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Waiters in other processes are woken by the completion notice, over
// sharded pub/sub where the server has it and plain pub/sub where it does
// not, with the value inline when it is small and read from Redis when not.
func TestWaitersWakeOnNotice(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name    string
		args    []string // redis-server arguments
		opts    corral.Options
		size    int // value size
		inlined bool
	}{
		{name: "sharded inline", size: 100, inlined: true},
		{name: "sharded large", size: 64 << 10},
		{name: "plain by option", opts: corral.Options{DisableShardedPubSub: true}, size: 100, inlined: true},
		{name: "plain by option large", opts: corral.Options{DisableShardedPubSub: true}, size: 64 << 10},
		{name: "server without SPUBLISH", args: []string{"--rename-command", "SPUBLISH", ""}, size: 100, inlined: true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			srv := redistest.Start(t, mode.args...)
			ctx := context.Background()
			want := bytes.Repeat([]byte{'v'}, mode.size)
			holder := newCache(t, srv.Client(), &mode.opts)
			finish := hold(t, holder, "{k}", want, nil)

			const processes = 3
			var wg sync.WaitGroup
			var wrong atomic.Int32
			caches := make([]*corral.Cache, processes)
			fetches := make([]atomic.Int32, processes)
			fetchSHA := scriptSHA(t, "fetch")
			for i := range caches {
				rdb := srv.Client()
				f := &faults{}
				f.setBefore(func(cmd redis.Cmder) error {
					if isScript(cmd, fetchSHA) {
						fetches[i].Add(1)
					}
					return nil
				})
				rdb.AddHook(f)
				caches[i] = newCache(t, rdb, &mode.opts)
				for range 20 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
						defer cancel()
						v, err := caches[i].Fetch(cctx, "{k}", time.Minute, value("not me"))
						if err != nil || !bytes.Equal(v, want) {
							wrong.Add(1)
						}
					}()
				}
			}
			waitSubscribed(t, srv.Client(), "corral:n:{k}:{k}", processes)
			// Subscribed is not waiting: a flight whose callers contend
			// subscribes before its fetch.lua (its echo, notify's Listen).
			eventually(t, 10*time.Second, "every process told to wait", func() bool {
				for _, c := range caches {
					if c.Stats().Waits != 1 {
						return false
					}
				}
				return true
			})
			released := time.Now()
			finish()
			wg.Wait()
			if wrong.Load() > 0 {
				t.Fatalf("%d waiters did not get the value", wrong.Load())
			}
			// Woken by the notice, not by the fallback re-check at the
			// lease's expiry (LeaseTTL 5 s, past the callers' 4 s
			// deadline): that re-check would be one more fetch, which the
			// counts below rule out. How long the wake took is only
			// reported: on a starved machine it is the scheduler's.
			t.Logf("waiters answered %v after the load ended", time.Since(released))
			// fetch; fetch after subscribing, unless the first one's echo
			// said it was listening already (Listen: 20 callers contend);
			// and for a value too large to travel in the notice, one more
			// to read it (unless the fetch after subscribing already found
			// it: the load may end while a process is between its
			// confirmation and that fetch).
			wantFetches := int32(3)
			if mode.inlined {
				wantFetches = 2
			}
			for i, c := range caches {
				st := c.Stats()
				if n := fetches[i].Load(); st.Loads != 0 || st.Waited != 20 || st.Misses != 0 || st.Waits != 1 || n < 1 || n > wantFetches {
					t.Fatalf("waiter stats %+v, %d fetches (want %d)", st, fetches[i].Load(), wantFetches)
				}
			}
		})
	}
}

// A waiter whose notice is lost (here: no pub/sub at all, the lease expires
// with its holder) takes over within LeaseTTL plus the timer's jitter.
func TestWaiterTakesOverAnExpiredLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{LeaseTTL: 300 * time.Millisecond})
	ctx := context.Background()
	// A holder that died: a lease nobody renews.
	e.rdb.Set(ctx, leaseName("k"), "dead-holder", 300*time.Millisecond)
	start := time.Now()
	v, err := e.c.Fetch(ctx, "{k}", time.Minute, value("v"))
	if err != nil || string(v) != "v" {
		t.Fatalf("Fetch = %q, %v", v, err)
	}
	if took := time.Since(start); took > 300*time.Millisecond+300*time.Millisecond/4+2*slack {
		t.Fatalf("took over after %v; want within LeaseTTL + jitter", took)
	}
}
