package corral_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// peekRounds is a go-redis hook that counts, per node, the pipelines that
// read entries (HMGET): the round trips of peeks.
type peekRounds struct {
	addr   string
	mu     *sync.Mutex
	rounds map[string]int // by node address
	cmds   map[string]int // HMGETs by node address
}

func (h peekRounds) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h peekRounds) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h peekRounds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if c.Name() == "hmget" {
				n++
			}
		}
		if n > 0 {
			h.mu.Lock()
			h.rounds[h.addr]++
			h.cmds[h.addr] += n
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// On a 3-master Cluster, a FetchMany of keys spread over many slots works
// (no command spans two slots: no CROSSSLOT), cold and warm, and reads the
// warm keys in one round trip per master.
func TestFetchMany_Cluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc := cl.Client()
	var mu sync.Mutex
	rounds, cmds := map[string]int{}, map[string]int{}
	cc.OnNewNode(func(rdb *redis.Client) {
		rdb.AddHook(peekRounds{addr: rdb.Options().Addr, mu: &mu, rounds: rounds, cmds: cmds})
	})
	c := newCache(t, cc, nil)
	ctx := context.Background()
	keys := keyRange("cl:", 0, 150)
	for i := range 50 { // and keys that share slots through their hash tags
		keys = append(keys, "{user"+strconv.Itoa(i%5)+"}:"+strconv.Itoa(i))
	}
	var o batchOrigin
	vals, err := c.FetchMany(ctx, keys, time.Minute, o.load)
	if err != nil {
		t.Fatal(err)
	}
	wantValues(t, vals, keys)
	if calls := o.called(); len(calls) != 1 || len(calls[0]) != len(keys) {
		t.Fatalf("%d loadMany calls; want one with all %d keys", len(calls), len(keys))
	}

	mu.Lock()
	clear(rounds)
	clear(cmds)
	mu.Unlock()
	vals, err = c.FetchMany(ctx, keys, time.Minute, o.load)
	if err != nil {
		t.Fatal(err)
	}
	wantValues(t, vals, keys)
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range cmds {
		total += n
	}
	if len(o.called()) != 1 || len(rounds) != 3 || total != len(keys) || slices.Max(mapValues(rounds)) != 1 {
		t.Fatalf("warm: %d loadMany calls; peek round trips by master %v (HMGETs %v); want one round trip to each of 3 masters for %d keys",
			len(o.called()), rounds, cmds, len(keys))
	}
	if st := c.Stats(); st.Hits != uint64(len(keys)) || st.RedisErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func mapValues(m map[string]int) []int {
	vs := make([]int, 0, len(m))
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
}

// With Redis down, FetchMany fails open as Fetch does: one loadMany call
// for all the keys, its values returned, nothing cached in Redis; then,
// for FailSafe.Throttle, the keys are answered from this process's memory
// without a load. With DisableFailSafe, every round loads.
func TestFetchMany_FailOpen(t *testing.T) {
	t.Parallel()
	for _, safe := range []bool{true, false} {
		t.Run(fmt.Sprintf("fail-safe %v", safe), func(t *testing.T) { fetchManyFailOpen(t, safe) })
	}
}

func fetchManyFailOpen(t *testing.T, safe bool) {
	srv := redistest.Start(t)
	rdb := srv.Client(func(o *redis.Options) { o.DialTimeout = 100 * time.Millisecond })
	o := failOpts()
	o.DisableFailSafe = !safe
	o.FailSafe.Throttle = time.Hour // the whole test
	c := newCache(t, rdb, o)
	ctx := context.Background()
	srv.Kill()
	keys := keyRange("down:", 0, 20)
	for round := 1; round <= 3; round++ {
		var o batchOrigin
		vals, err := c.FetchMany(ctx, keys, time.Minute, o.load)
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, vals, keys)
		st := c.Stats()
		switch calls := o.called(); {
		case round == 1 || !safe:
			if len(calls) != 1 || len(calls[0]) != len(keys) {
				t.Fatalf("round %d: loadMany calls %v; want one with every key", round, calls)
			}
			want := uint64(len(keys))
			if !safe {
				want *= uint64(round)
			}
			if st.FailOpens != want {
				t.Fatalf("round %d: %+v; want %d fail-opens", round, st, want)
			}
		default:
			if len(calls) != 0 || st.FailSafeHits != uint64((round-1)*len(keys)) {
				t.Fatalf("round %d: loadMany calls %v, %+v; want none, every key from memory", round, calls, st)
			}
		}
		if !st.BreakerOpen {
			t.Fatalf("round %d: the breaker is closed with Redis refusing connections: %+v", round, st)
		}
	}
	keys = keyRange("failing:", 0, 20)
	var be *corral.BatchError
	if _, err := c.FetchMany(ctx, keys, time.Minute, (&batchOrigin{err: errors.New("origin down")}).load); !errors.As(err, &be) || len(be.Errs) != len(keys) {
		t.Fatalf("a failing loadMany while Redis is down: %v", err)
	}
}

// A FetchMany of cold keys spread over a 3-master Cluster, one master
// dead: every key is answered with its value; the live masters' keys are
// loaded under their leases and stored, the dead master's keys fail open,
// all of them in one loadMany call, not one call per key; and a second
// FetchMany serves the live masters' keys from Redis.
func TestFetchMany_ClusterMasterDown(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	c := newCache(t, cl.Client(), &corral.Options{Logger: quiet, RedisTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	keys := keyRange("spread:", 0, 300)
	// A master other than the one of the group invalidation records
	// (P:c:{P}): with theirs down, no entry can be judged (docs/design.md).
	records := cl.MasterOf("corral:c:{corral}")
	down := cl.MasterOf(wire.EntryName("corral", keys[0]))
	for i := 1; down == records; i++ {
		down = cl.MasterOf(wire.EntryName("corral", keys[i]))
	}
	var onDown, onUp []string
	for _, k := range keys {
		if cl.MasterOf(wire.EntryName("corral", k)) == down {
			onDown = append(onDown, k)
		} else {
			onUp = append(onUp, k)
		}
	}
	down.Kill()
	var o batchOrigin
	vals, err := c.FetchMany(ctx, keys, time.Hour, o.load)
	if err != nil {
		t.Fatalf("FetchMany with a master down: %v", err)
	}
	wantValues(t, vals, keys)
	calls := o.called()
	loaded := map[string]int{}
	for _, call := range calls {
		for _, k := range call {
			loaded[k]++
		}
	}
	for _, k := range keys {
		if loaded[k] != 1 {
			t.Fatalf("%q loaded %d times; want once (calls %d)", k, loaded[k], len(calls))
		}
	}
	if len(calls) > 3 {
		t.Fatalf("%d loadMany calls for %d keys (%d on the dead master); want the dead master's keys in one", len(calls), len(keys), len(onDown))
	}
	var again batchOrigin
	vals, err = c.FetchMany(ctx, onUp, time.Hour, again.load)
	if err != nil || len(again.called()) != 0 {
		t.Fatalf("the live masters' keys again: %v, loadMany calls %v; want every one from Redis", err, again.called())
	}
	wantValues(t, vals, onUp)
}
