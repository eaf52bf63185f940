package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/corralhq/corral/lock"
	"github.com/redis/go-redis/v9"
)

// fencedReport is a resource that checks fencing tokens: it refuses a write
// whose token is smaller than the largest it has accepted (in SQL: UPDATE
// ... SET fence = $1 WHERE id = $2 AND fence <= $1).
type fencedReport struct {
	fence int64
	text  string
}

func (r *fencedReport) write(fence int64, text string) error {
	if fence < r.fence {
		return fmt.Errorf("refused: fence %d is older than %d", fence, r.fence)
	}
	r.fence, r.text = fence, text
	return nil
}

// docs/lock.md's program: this function's body is the body of its main
// (with redisAddr for "localhost:6379"), and TestReadmeLock keeps the two
// the same.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	// Wait for a held lock with exponential backoff and full jitter, up to
	// the context's deadline; the watchdog keeps the lock while we work.
	locks, err := lock.New(rdb, &lock.Options{
		Retry:    lock.ExponentialBackoff(10*time.Millisecond, time.Second),
		Watchdog: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	first, err := locks.Obtain(wait, "readme:nightly-report", 30*time.Second)
	if err != nil {
		log.Fatal(err) // errors.Is(err, lock.ErrNotObtained): still held when the wait ended
	}

	// Meanwhile another process, without retries, is turned away at once.
	others, err := lock.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = others.Obtain(ctx, "readme:nightly-report", 30*time.Second)
	fmt.Println("held elsewhere:", errors.Is(err, lock.ErrNotObtained))

	// Every write to the resource carries the holder's fencing token.
	report := &fencedReport{}
	fmt.Println("first write:", report.write(first.Fence(), "from the first holder"))
	if err := first.Release(ctx); err != nil { // stops the watchdog, frees the lock
		log.Fatal(err)
	}

	// The next holder's token is larger, so a late write from the first
	// holder (paused past its lock, say) is refused.
	next, err := others.Obtain(ctx, "readme:nightly-report", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("next write:", report.write(next.Fence(), "from the next holder"))
	fmt.Println("late write refused:", report.write(first.Fence(), "late") != nil, report.text)
	// Output:
	// held elsewhere: true
	// first write: <nil>
	// next write: <nil>
	// late write refused: true from the next holder
}

// Obtain a lock, find it taken by a second caller, and pass it on: the next
// holder's fencing token is larger, so a resource that checks tokens can
// turn away a late write from the first.
func ExampleClient_Obtain() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr}) // e.g. "localhost:6379"
	defer rdb.Close()

	locks, err := lock.New(rdb, nil) // nil: all defaults, no retries
	if err != nil {
		panic(err)
	}
	first, err := locks.Obtain(ctx, "example:nightly-report", 30*time.Second)
	fmt.Println("first:", err)

	_, err = locks.Obtain(ctx, "example:nightly-report", 30*time.Second)
	fmt.Println("second:", errors.Is(err, lock.ErrNotObtained))

	if err := first.Release(ctx); err != nil {
		panic(err)
	}
	next, err := locks.Obtain(ctx, "example:nightly-report", 30*time.Second)
	fmt.Println("next:", err, next.Fence() > first.Fence())
	next.Release(ctx)
	// Output:
	// first: <nil>
	// second: true
	// next: <nil> true
}

// With retries, Obtain waits for a held lock until it is free or the context
// ends; the watchdog keeps the lock for as long as the work takes, and
// Release stops it.
func ExampleOptions() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	locks, err := lock.New(rdb, &lock.Options{
		Retry:    lock.ExponentialBackoff(10*time.Millisecond, time.Second),
		Watchdog: true,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // how long to wait for the lock
	defer cancel()
	l, err := locks.Obtain(ctx, "example:migration", 10*time.Second)
	if err != nil {
		panic(err) // errors.Is(err, lock.ErrNotObtained) when the context ended first
	}
	defer l.Release(context.Background())

	select {
	case <-l.Done():
		fmt.Println("lost the lock: stop")
	default:
		fmt.Println("holding it, fence > 0:", l.Fence() > 0)
	}
	// Output: holding it, fence > 0: true
}
