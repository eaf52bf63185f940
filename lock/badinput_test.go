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

// More bad input, beyond TestBadInput: huge and binary keys work and make
// short errors; the shortest TTL holds; nil contexts panic with a message
// that says where; a closed Redis client is an error, not "held".
func TestBadInputKeysContextsClients(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	c := newLocks(t, rdb, nil)
	ctx := context.Background()

	huge := strings.Repeat("k", 1<<20) // 1 MiB
	l := obtain(t, c, huge, time.Minute)
	if n := rdb.Exists(ctx, "lock:l:{"+fnvTag(huge)+"}:"+huge).Val(); n != 1 || l.Fence() <= 0 {
		t.Fatalf("a 1 MiB key: the lock is not under its whole name (%d), fence %d", n, l.Fence())
	}
	_, err := c.Obtain(ctx, huge, time.Minute)
	isErr(t, "a second Obtain of a 1 MiB key", err, lock.ErrNotObtained)
	if len(err.Error()) > 200 || !strings.Contains(err.Error(), "... (1048576 bytes)") {
		t.Fatalf("the error quotes the whole key (%d bytes): %.200s", len(err.Error()), err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) || len(err.Error()) > 200 {
		t.Fatalf("Release again: %.200s (%d bytes); want a short ErrNotHeld", err, len(err.Error()))
	}

	binary := "\x00\xff{\x01}:\n"
	l = obtain(t, c, binary, time.Minute)
	if n := rdb.Exists(ctx, "lock:f:{\x01}:"+binary).Val(); n != 1 {
		t.Fatalf("a binary key's counter is not under its hash tag: %q", rdb.Keys(ctx, "lock:f:*").Val())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	l = obtain(t, c, "shortest", lock.MinTTL) // some validity left: Release finds it held
	if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		t.Fatal(err)
	}

	l = obtain(t, c, "nil-ctx", time.Minute)
	var nilCtx context.Context
	for name, call := range map[string]func(){
		"Obtain":  func() { c.Obtain(nilCtx, "k", time.Second) },
		"Refresh": func() { l.Refresh(nilCtx, time.Second) },
		"Release": func() { l.Release(nilCtx) },
		"TTL":     func() { l.TTL(nilCtx) },
	} {
		if got := panicOf(call); got != "lock: nil Context" {
			t.Errorf("%s(nil Context) panicked with %v; want \"lock: nil Context\"", name, got)
		}
	}
	notEnded(t, l, "after calls with a nil Context")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	closed := srv.Client()
	cl := newLocks(t, closed, nil)
	held := obtain(t, cl, "closed", time.Minute)
	closed.Close()
	_, err = cl.Obtain(ctx, "other", time.Second)
	if !errors.Is(err, redis.ErrClosed) || errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain through a closed client: %v; want redis.ErrClosed, not ErrNotObtained", err)
	}
	if err := held.Release(ctx); !errors.Is(err, redis.ErrClosed) || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release through a closed client: %v; want redis.ErrClosed", err)
	}
	isErr(t, "Refresh of a Lock Release ended", held.Refresh(ctx, time.Second), lock.ErrNotHeld)

	if _, again := lock.LimitRetry(nil, 3)(1); again {
		t.Fatal("LimitRetry(nil, 3) retries")
	}
}

// panicOf returns what f panicked with, or nil.
func panicOf(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}
