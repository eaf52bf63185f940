package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/lock"
)

// counted wraps s and counts the tries Obtain made, as the strategy learns
// of them.
func counted(s lock.RetryStrategy, tries *atomic.Int64) lock.RetryStrategy {
	return func(n int) (time.Duration, bool) {
		tries.Store(int64(n))
		return s(n)
	}
}

// Obtain retries until its context's deadline, then gives up with an error
// that says so: ErrNotObtained and context.DeadlineExceeded, the key and the
// number of tries.
func TestRetryGivesUpAtDeadline(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocks(t, srv.Client(), nil)
	h := obtain(t, holder, "busy", time.Minute)
	var tries atomic.Int64
	c := newLocks(t, srv.Client(), &lock.Options{Retry: counted(lock.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond), &tries)})

	const deadline = 300 * time.Millisecond
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	_, err := c.Obtain(ctx, "busy", time.Second)
	took := time.Since(start)
	isErr(t, "Obtain of a held lock", err, lock.ErrNotObtained, context.DeadlineExceeded)
	if !strings.Contains(err.Error(), `"busy"`) || !strings.Contains(err.Error(), "tries") {
		t.Fatalf("the error does not name the key and the tries: %v", err)
	}
	if took < deadline-margin || took > deadline+prompt {
		t.Fatalf("gave up after %v; the deadline was %v", took, deadline)
	}
	if n := tries.Load(); n < 2 {
		t.Fatalf("%d tries in %v", n, deadline)
	}
	notEnded(t, h, "while another Obtain retried")
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Without retries (the default) a held lock fails at once; LimitRetry stops
// after its count of tries; an Obtain whose context has ended sends nothing.
func TestRetryLimits(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	holder := newLocks(t, rdb, nil)
	h := obtain(t, holder, "busy", time.Minute)
	ctx := context.Background()

	start := time.Now()
	_, err := newLocks(t, rdb, nil).Obtain(ctx, "busy", time.Second)
	isErr(t, "Obtain without retries", err, lock.ErrNotObtained)
	if errors.Is(err, context.DeadlineExceeded) || time.Since(start) > prompt {
		t.Fatalf("Obtain without retries: %v after %v", err, time.Since(start))
	}

	var tries atomic.Int64
	c := newLocks(t, rdb, &lock.Options{Retry: counted(lock.LimitRetry(lock.LinearBackoff(time.Millisecond), 3), &tries)})
	_, err = c.Obtain(ctx, "busy", time.Second)
	isErr(t, "Obtain with LimitRetry(3)", err, lock.ErrNotObtained)
	if n := tries.Load(); n != 3 {
		t.Fatalf("LimitRetry(3) made %d tries", n)
	}

	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Obtain(done, "free", time.Second)
	isErr(t, "Obtain with a cancelled context", err, lock.ErrNotObtained, context.Canceled)
	if n := rdb.Exists(ctx, "lock:l:{"+fnvTag("free")+"}:free", "lock:f:{"+fnvTag("free")+"}:free").Val(); n != 0 {
		t.Fatal("an Obtain with a cancelled context reached Redis")
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A retrying Obtain takes the lock soon after its holder releases it.
func TestRetryObtainsAfterRelease(t *testing.T) {
	srv := redistest.Start(t)
	holder := newLocks(t, srv.Client(), nil)
	h := obtain(t, holder, "handover", time.Minute)
	waiting := make(chan struct{}, 1)
	c := newLocks(t, srv.Client(), &lock.Options{Retry: func(n int) (time.Duration, bool) {
		select {
		case waiting <- struct{}{}: // the first time: the contender is waiting
		default:
		}
		return lock.LinearBackoff(20 * time.Millisecond)(n)
	}})
	got := make(chan *lock.Lock, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := c.Obtain(ctx, "handover", time.Second)
		got <- l
		errc <- err
	}()
	<-waiting
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	l := <-got
	if err := <-errc; err != nil {
		t.Fatalf("Obtain after the release: %v", err)
	}
	if took := time.Since(released); took > prompt {
		t.Fatalf("obtained %v after the release", took)
	}
	if l.Fence() <= h.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), h.Fence())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Obtain waits no longer than the holder's remaining TTL, however long the
// strategy's wait: a lock whose holder vanished is taken when it expires.
func TestRetryWaitCappedByTTL(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	start := time.Now()
	obtain(t, newLocks(t, srv.Client(), nil), "abandoned", ttl) // never released
	c := newLocks(t, srv.Client(), &lock.Options{Retry: lock.LinearBackoff(time.Hour)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Obtain(ctx, "abandoned", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < ttl-margin || took > ttl+prompt {
		t.Fatalf("obtained after %v; the abandoned lock's TTL was %v", took, ttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The strategies' waits stay in their documented ranges.
func TestRetryStrategies(t *testing.T) {
	if _, ok := lock.NoRetry()(1); ok {
		t.Fatal("NoRetry retries")
	}
	lin := lock.LinearBackoff(100 * time.Millisecond)
	exp := lock.ExponentialBackoff(10*time.Millisecond, time.Second)
	var linMin, linMax time.Duration = time.Hour, 0
	for i := range 2000 {
		w, ok := lin(i + 1)
		if !ok || w < 50*time.Millisecond || w >= 150*time.Millisecond {
			t.Fatalf("LinearBackoff(100ms) waits %v (%v)", w, ok)
		}
		linMin, linMax = min(linMin, w), max(linMax, w)
		for n, ceil := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 4: 80 * time.Millisecond,
			7: 640 * time.Millisecond, 8: time.Second, 64: time.Second, 1 << 30: time.Second} {
			if w, ok := exp(n); !ok || w < 0 || w >= ceil {
				t.Fatalf("ExponentialBackoff(10ms, 1s) after %d tries waits %v (%v); want in [0, %v)", n, w, ok, ceil)
			}
		}
	}
	if linMax-linMin < 50*time.Millisecond {
		t.Fatalf("LinearBackoff's jitter spans only %v..%v", linMin, linMax)
	}
	if w, _ := lock.LinearBackoff(0)(1); w < time.Millisecond/2 {
		t.Fatalf("LinearBackoff(0) waits %v; want at least 0.5ms (1ms, jittered)", w)
	}
	var big time.Duration
	for range 200 {
		w, _ := exp(20)
		big = max(big, w)
	}
	if big < 500*time.Millisecond {
		t.Fatalf("ExponentialBackoff's full jitter never came near its cap: at most %v in 200 draws", big)
	}
	lim := lock.LimitRetry(lock.LinearBackoff(time.Millisecond), 2)
	if _, ok := lim(1); !ok {
		t.Fatal("LimitRetry(s, 2) gave up after 1 try")
	}
	if _, ok := lim(2); ok {
		t.Fatal("LimitRetry(s, 2) retries after 2 tries")
	}
}
