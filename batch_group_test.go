package corral_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/slots"
	"github.com/redis/go-redis/v9"
)

// A FetchMany holds its keys' leases as one: its keys' leases are members
// of one group lease (off a Cluster), renewed once a round however many
// keys it holds. 3,000 keys held through ten renewal rounds cost about ten
// renewals (PEXPIRE, which only renew.lua sends before the commits), not
// 30,000, and every key's lease is held throughout.
func TestFetchMany_OneRenewalPerGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{LeaseTTL: 200 * time.Millisecond})
	ctx := context.Background()
	keys := keyRange("g:", 0, 3000)
	started, release := make(chan struct{}), make(chan struct{})
	load := func(ctx context.Context, missing []string) (map[string][]byte, error) {
		close(started)
		<-release
		return valuesOf(missing), nil
	}
	e.rdb.ConfigResetStat(ctx)
	done := make(chan error, 1)
	go func() {
		vals, err := e.c.FetchMany(ctx, keys, time.Minute, load)
		if err == nil && len(vals) != len(keys) {
			err = fmt.Errorf("%d values of %d keys", len(vals), len(keys))
		}
		done <- err
	}()
	<-started
	eventually(t, 10*time.Second, "ten renewal rounds", func() bool { return calls(t, e.rdb, "pexpire") >= 10 })
	if n := calls(t, e.rdb, "pexpire"); n > 100 {
		t.Errorf("%d renewals for 3,000 keys over about ten rounds; want one a round", n)
	}
	if groups := countKeys(t, e.rdb, "corral:b:*"); groups != 1 {
		t.Errorf("%d group leases; want 1 (one node)", groups)
	}
	if held := countKeys(t, e.rdb, "corral:l:*"); held != len(keys) {
		t.Errorf("%d of %d keys' leases held after ten rounds", held, len(keys))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := e.c.Stats(); s.LeasesLost > 0 || s.CommitsRejected > 0 || s.Loads != uint64(len(keys)) {
		t.Fatalf("stats %+v; want every key loaded once, no lease lost", s)
	}
	eventually(t, 5*time.Second, "the group lease expires once unused", func() bool { return countKeys(t, e.rdb, "corral:b:*") == 0 })
}

// On a Cluster a FetchMany's keys have one group lease per slot, in that
// slot (a script never spans two): as many as the keys' distinct slots.
func TestFetchMany_ClusterGroupPerSlot(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	cc := cl.Client()
	// The default LeaseTTL: at 200 ms, a loaded machine (make test) once let
	// 16 of the 203 groups expire before they were counted.
	c := newCache(t, cc, nil)
	ctx := context.Background()
	keys := keyRange("cg:", 0, 200)
	for i := range 40 {
		keys = append(keys, "{tag"+strconv.Itoa(i%4)+"}:"+strconv.Itoa(i))
	}
	want := map[int]bool{}
	for _, k := range keys {
		want[slots.Of(entryName(k))] = true
	}
	started, release := make(chan struct{}), make(chan struct{})
	load := func(ctx context.Context, missing []string) (map[string][]byte, error) {
		close(started)
		<-release
		return valuesOf(missing), nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.FetchMany(ctx, keys, time.Minute, load)
		done <- err
	}()
	<-started
	got := map[int]bool{}
	var mu sync.Mutex // ForEachMaster runs its calls at once
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		names, err := m.Keys(ctx, "corral:b:*").Result()
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			if m.ClusterKeySlot(ctx, n).Val() != int64(slots.Of(n)) {
				return fmt.Errorf("group %s: slot %d by Redis, %d by corral", n, m.ClusterKeySlot(ctx, n).Val(), slots.Of(n))
			}
			got[slots.Of(n)] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("group leases in %d slots; want one in each of the keys' %d slots", len(got), len(want))
	}
	for s := range want {
		if !got[s] {
			t.Fatalf("no group lease in slot %d", s)
		}
	}
}

// A process holding a FetchMany's leases that Redis no longer hears from
// (partitioned, or dead) loses them all within about LeaseTTL, as one key's
// lease: its group expires, and another process takes every key over and
// loads it, each once. The partitioned process's load, run on, stores
// nothing over it.
func TestFetchMany_PartitionedHolderTakenOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &corral.Options{LeaseTTL: 200 * time.Millisecond})
	ctx := context.Background()
	ca, fa := e.faultyClient()
	a := newCache(t, ca, &corral.Options{LeaseTTL: 200 * time.Millisecond, RedisTimeout: 100 * time.Millisecond})
	keys := keyRange("p:", 0, 500)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.FetchMany(ctx, keys, time.Minute, func(ctx context.Context, missing []string) (map[string][]byte, error) {
			close(started)
			<-release
			m := map[string][]byte{}
			for _, k := range missing {
				m[k] = []byte("stale-" + k)
			}
			return m, nil
		})
	}()
	<-started
	cut := errors.New("partitioned")
	fa.setBefore(func(redis.Cmder) error { return cut })
	var mu sync.Mutex
	loaded := map[string]int{}
	vals, err := e.c.FetchMany(ctx, keys, time.Minute, func(ctx context.Context, missing []string) (map[string][]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range missing {
			loaded[k]++
		}
		return valuesOf(missing), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantValues(t, vals, keys)
	for _, k := range keys {
		if loaded[k] != 1 {
			t.Fatalf("key %s loaded %d times by the process that took over; want once", k, loaded[k])
		}
	}
	close(release)
	<-done
	for _, k := range keys[:20] {
		if v, err := e.c.Get(ctx, k); err != nil || string(v) != "v:"+k {
			t.Fatalf("%s = %q, %v after the partitioned load ended; want the new holder's value", k, v, err)
		}
	}
}

// valuesOf returns "v:"+key for each of keys, as wantValues wants.
func valuesOf(keys []string) map[string][]byte {
	m := make(map[string][]byte, len(keys))
	for _, k := range keys {
		m[k] = []byte("v:" + k)
	}
	return m
}

// calls returns how many times Redis ran cmd (INFO commandstats), scripts'
// calls included.
func calls(t *testing.T, rdb *redis.Client, cmd string) int {
	t.Helper()
	info := rdb.Info(context.Background(), "commandstats").Val()
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
