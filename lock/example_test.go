package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/lock"
	"github.com/redis/go-redis/v9"
)

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
