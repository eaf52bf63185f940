package lock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// On a 3-master Cluster: a lock's two names share a slot (no CROSSSLOT),
// locks spread over every master, a held lock is refused to another holder,
// and independent cluster clients contend with fences in order.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	cc := cl.Client()
	c := newLocks(t, cc, nil)

	for i := range 30 {
		key := "job:" + strconv.Itoa(i)
		if i%3 == 0 {
			key = "user:{" + strconv.Itoa(i) + "}:job" // a hash tag of its own
		}
		l := obtain(t, c, key, 10*time.Second)
		if _, err := newLocks(t, cc, nil).Obtain(ctx, key, time.Second); err == nil {
			t.Fatalf("%q obtained twice", key)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
	}
	var mu sync.Mutex // ForEachMaster runs its function on every master at once
	masters := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, "lock:f:*").Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			mu.Lock()
			masters++
			mu.Unlock()
		}
		for _, counter := range keys {
			lockName := "lock:l:" + counter[len("lock:f:"):]
			a, b := cc.ClusterKeySlot(ctx, counter).Val(), cc.ClusterKeySlot(ctx, lockName).Val()
			if a != b {
				t.Errorf("%s in slot %d, %s in slot %d", counter, a, lockName, b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if masters != 3 {
		t.Fatalf("the locks' counters are on %d masters of 3", masters)
	}

	const workers, rounds, key = 4, 10, "cluster:{c}"
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		rdb := cl.Client()
		locks := newLocks(t, rdb, contention())
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- contend(cctx, locks, rdb, key, rounds, "cluster worker "+strconv.Itoa(i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkContention(t, cc, key, workers*rounds)
}
