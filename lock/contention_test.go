package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/lock"
	"github.com/redis/go-redis/v9"
)

// contention is the retry strategy of contending holders.
func contention() *lock.Options {
	return &lock.Options{Retry: lock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)}
}

// contend obtains key rounds times through c. Each time it holds the lock, it
// runs a read-modify-write of a counter in Redis, which only mutual exclusion
// keeps right, and appends its fencing token to a list. It marks the critical
// section with SET NX, so a second holder inside at the same time is caught
// in the act. me names the contender in errors.
func contend(ctx context.Context, c *lock.Client, rdb redis.UniversalClient, key string, rounds int, me string) error {
	inside, count, fences := key+":inside", key+":count", key+":fences"
	for i := range rounds {
		l, err := c.Obtain(ctx, key, 10*time.Second)
		if err != nil {
			return fmt.Errorf("%s, round %d: %w", me, i, err)
		}
		if ok, err := rdb.SetNX(ctx, inside, me, 0).Result(); err != nil || !ok {
			return fmt.Errorf("%s entered while %q was inside (%v)", me, rdb.Get(ctx, inside).Val(), err)
		}
		n, err := rdb.Get(ctx, count).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if err := rdb.RPush(ctx, fences, l.Fence()).Err(); err != nil {
			return err
		}
		if err := rdb.Set(ctx, count, n+1, 0).Err(); err != nil {
			return err
		}
		if err := rdb.Del(ctx, inside).Err(); err != nil {
			return err
		}
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("%s, round %d: %w", me, i, err)
		}
	}
	return nil
}

// checkContention checks what contend left: every round counted once, and
// the fencing tokens strictly increasing in the order the holders held the
// lock.
func checkContention(t *testing.T, rdb redis.UniversalClient, key string, total int) {
	t.Helper()
	ctx := context.Background()
	if n, err := rdb.Get(ctx, key+":count").Int(); err != nil || n != total {
		t.Fatalf("count = %d, %v; want %d (a lost update means two holders at once)", n, err, total)
	}
	fences := rdb.LRange(ctx, key+":fences", 0, -1).Val()
	if len(fences) != total {
		t.Fatalf("%d fences for %d rounds", len(fences), total)
	}
	var last int64
	for i, f := range fences {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n <= last {
			t.Fatalf("fence #%d is %s after %d: not increasing", i, f, last)
		}
		last = n
	}
}

// Independent clients (each its own connection pool) in goroutines contend
// for one lock: one holder at a time, fences in order.
func TestContention(t *testing.T) {
	srv := redistest.Start(t)
	const workers, rounds, key = 8, 15, "contended:{c}"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		rdb := srv.Client()
		c := newLocks(t, rdb, contention())
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- contend(ctx, c, rdb, key, rounds, "worker "+strconv.Itoa(i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkContention(t, srv.Client(), key, workers*rounds)
}
