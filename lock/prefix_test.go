package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/lock"
	"github.com/redis/go-redis/v9"
)

// Every error of the package says "lock:" once, at the front, and matches
// its sentinel (and the context's error) with errors.Is. The Client uses
// Prefix "app": a Redis name under the default prefix, "lock:l:{…}:k",
// would say lock: too, and is not a prefix.
func TestErrorsSayLockOnce(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	sayOnce := func(what string, err error, targets ...error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		t.Logf("%s: %s", what, err)
		if text := err.Error(); !strings.HasPrefix(text, "lock: ") || strings.Count(text, "lock:") != 1 {
			t.Errorf("%s: %q; want lock: once, at the front", what, text)
		}
		for _, target := range targets {
			if !errors.Is(err, target) {
				t.Errorf("%s: %q does not match %v", what, err, target)
			}
		}
	}
	_, err := lock.New(nil, nil)
	sayOnce("New(nil)", err, lock.ErrNilClient)
	_, err = lock.New(srv.Client(), &lock.Options{Prefix: "a{b"})
	sayOnce("New with a brace in Prefix", err, lock.ErrInvalidOptions)
	c := newLocks(t, srv.Client(), &lock.Options{Prefix: "app"})
	_, err = c.Obtain(ctx, "", time.Minute)
	sayOnce("Obtain of an empty key", err, lock.ErrInvalidKey)
	_, err = c.Obtain(ctx, "k", 0)
	sayOnce("Obtain with ttl 0", err, lock.ErrInvalidTTL)
	l := obtain(t, c, "k", time.Minute)
	_, err = c.Obtain(ctx, "k", time.Minute)
	sayOnce("Obtain of a held lock", err, lock.ErrNotObtained)
	waiting := newLocks(t, srv.Client(), &lock.Options{Prefix: "app", Retry: lock.LinearBackoff(time.Millisecond)})
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = waiting.Obtain(short, "k", time.Minute)
	cancel()
	sayOnce("Obtain that gave up at the deadline", err, lock.ErrNotObtained, context.DeadlineExceeded)
	sayOnce("Refresh with ttl 0", l.Refresh(ctx, 0), lock.ErrInvalidTTL)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	sayOnce("Release again", l.Release(ctx), lock.ErrNotHeld)
	sayOnce("Refresh after Release", l.Refresh(ctx, time.Minute), lock.ErrNotHeld)

	down := newLocks(t, redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1}), &lock.Options{Prefix: "app"})
	held := obtain(t, down, "d", time.Minute)
	srv.Kill()
	_, err = down.Obtain(ctx, "e", time.Minute)
	sayOnce("Obtain with Redis killed", err)
	_, err = held.TTL(ctx)
	sayOnce("TTL with Redis killed", err)
	sayOnce("Release with Redis killed", held.Release(ctx))
}
