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
	"go.uber.org/goleak"
)

// Obtain, a second holder turned away, Release, and the next holder's
// larger fencing token; the Redis names are those of the package doc.
func TestObtainRelease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	a, b := newLocks(t, rdb, nil), newLocks(t, srv.Client(), nil) // independent clients
	ctx := context.Background()
	const key = "job:{7}"

	l := obtain(t, a, key, 10*time.Second)
	if l.Key() != key || l.Fence() <= 0 {
		t.Fatalf("Key() = %q, Fence() = %d", l.Key(), l.Fence())
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("TTL = %v, %v; want in (0, 10s]", ttl, err)
	}
	lockName, counter := taggedNames("7", key)
	if f, err := rdb.HGet(ctx, lockName, "f").Int64(); err != nil || f != l.Fence() {
		t.Fatalf("HGET %s f = %d, %v; want the fence %d", lockName, f, err, l.Fence())
	}
	if pttl := rdb.PTTL(ctx, lockName).Val(); pttl <= 0 {
		t.Fatalf("the lock has PTTL %v", pttl)
	}
	if pttl := rdb.PTTL(ctx, counter).Val(); pttl != -1 {
		t.Fatalf("the counter has PTTL %v; want none (-1)", pttl)
	}

	_, err := b.Obtain(ctx, key, time.Second)
	isErr(t, "a second Obtain", err, lock.ErrNotObtained)
	if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), key) {
		t.Fatalf("a second Obtain without retries: %v", err)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	ended(t, l, 0, "released")
	if n := rdb.Exists(ctx, lockName).Val(); n != 0 {
		t.Fatal("the lock is still in Redis after Release")
	}
	isErr(t, "Release again", l.Release(ctx), lock.ErrNotHeld)
	isErr(t, "Refresh after Release", l.Refresh(ctx, time.Second), lock.ErrNotHeld)
	_, err = l.TTL(ctx)
	isErr(t, "TTL after Release", err, lock.ErrNotHeld)

	next := obtain(t, b, key, time.Second)
	if next.Fence() <= l.Fence() {
		t.Fatalf("the next holder's fence %d is not above %d", next.Fence(), l.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Refresh extends the lock; a Refresh or Release by a holder whose lock was
// lost (deleted behind its back, as eviction or a failover would) and taken
// by another is refused and leaves the new holder's lock as it was.
func TestNonOwnerRefusedLockUntouched(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	a, b := newLocks(t, rdb, nil), newLocks(t, srv.Client(), nil)
	ctx := context.Background()
	const key = "report:{9}"
	lockName, _ := taggedNames("9", key)

	old := obtain(t, a, key, 2*time.Second)
	if err := old.Refresh(ctx, time.Hour); err != nil {
		t.Fatalf("Refresh by the holder: %v", err)
	}
	if ttl, err := old.TTL(ctx); err != nil || ttl < 50*time.Minute {
		t.Fatalf("TTL after Refresh(1h) = %v, %v", ttl, err)
	}

	rdb.Del(ctx, lockName) // the lock is lost
	cur := obtain(t, b, key, 10*time.Second)
	if cur.Fence() <= old.Fence() {
		t.Fatalf("the new holder's fence %d is not above the old one's %d", cur.Fence(), old.Fence())
	}
	owner := rdb.HGet(ctx, lockName, "o").Val()

	isErr(t, "Refresh by the old holder", old.Refresh(ctx, time.Hour), lock.ErrNotHeld)
	ended(t, old, 0, "Redis refused its Refresh")
	_, err := old.TTL(ctx)
	isErr(t, "TTL of the old holder", err, lock.ErrNotHeld)
	isErr(t, "Release by the old holder", old.Release(ctx), lock.ErrNotHeld)

	if got := rdb.HGet(ctx, lockName, "o").Val(); got != owner {
		t.Fatalf("the lock's owner changed from %q to %q", owner, got)
	}
	if ttl, err := cur.TTL(ctx); err != nil || ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("the new holder's TTL = %v, %v; want at most its own 10s", ttl, err)
	}
	notEnded(t, cur, "while it held the lock")
	if err := cur.Release(ctx); err != nil {
		t.Fatalf("the new holder's Release: %v", err)
	}
}

// A holder that pauses past its TTL: Redis expires the lock, the Lock ends
// on its own, a later holder gets a larger fencing token, and the stale
// holder's refresh, release and fenced write all fail.
func TestFencingAfterPause(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	a, b := newLocks(t, rdb, nil), newLocks(t, srv.Client(), &lock.Options{Retry: lock.LinearBackoff(10 * time.Millisecond)})
	ctx := context.Background()
	const key, res = "account:{1}", "resource:{1}"
	const ttl = 200 * time.Millisecond

	sent := time.Now()
	stale := obtain(t, a, key, ttl)
	if ok, err := write(ctx, rdb, res, stale.Fence(), "from the first holder"); !ok || err != nil {
		t.Fatalf("the first holder's write: %v, %v", ok, err)
	}

	// The first holder pauses (a GC pause, a stalled VM); meanwhile its
	// validity runs out and the second holder, retrying, takes the lock.
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cur, err := b.Obtain(octx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("the second holder's Obtain: %v", err)
	}
	if took := time.Since(sent); took < ttl-margin {
		t.Fatalf("the second holder got the lock %v after the first obtained it for %v", took, ttl)
	}
	ended(t, stale, prompt, "its validity ran out")
	if cur.Fence() <= stale.Fence() {
		t.Fatalf("the later holder's fence %d is not above the stale holder's %d", cur.Fence(), stale.Fence())
	}
	if ok, err := write(ctx, rdb, res, cur.Fence(), "from the second holder"); !ok || err != nil {
		t.Fatalf("the second holder's write: %v, %v", ok, err)
	}

	// The first holder wakes up.
	if ok, err := write(ctx, rdb, res, stale.Fence(), "stale"); ok || err != nil {
		t.Fatalf("the resource accepted the stale holder's write (%v, %v)", ok, err)
	}
	isErr(t, "the stale holder's Refresh", stale.Refresh(ctx, time.Minute), lock.ErrNotHeld)
	isErr(t, "the stale holder's Release", stale.Release(ctx), lock.ErrNotHeld)
	if v := rdb.HGet(ctx, res, "value").Val(); v != "from the second holder" {
		t.Fatalf("the resource holds %q", v)
	}
	if ttl, err := cur.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("the second holder's TTL = %v, %v", ttl, err)
	}
	if err := cur.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Without the watchdog, a Lock ends when its validity runs out unless a
// Refresh extends it; a Refresh that lands in time keeps it.
func TestValidity(t *testing.T) {
	srv := redistest.Start(t)
	c := newLocks(t, srv.Client(), nil)
	ctx := context.Background()

	l := obtain(t, c, "v", 300*time.Millisecond)
	if err := l.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
		t.Fatal("the Lock ended although a Refresh extended it to 5s")
	case <-time.After(600 * time.Millisecond): // twice the first TTL: the scenario's own time
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	l = obtain(t, c, "v", 300*time.Millisecond)
	ended(t, l, 300*time.Millisecond+prompt, "its validity ran out")
	if took := time.Since(start); took < 295*time.Millisecond-margin {
		t.Fatalf("the Lock ended after %v, before its validity (TTL 300ms less 1%% + 2ms)", took)
	}
	// Redis may still have it: the drift allowance. Release frees it anyway.
	if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		t.Fatal(err)
	}
}

// The watchdog keeps a lock alive for many TTLs, and Release stops it
// before returning: no watchdog goroutine (and so no refresh) is left.
func TestWatchdog(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	c := newLocks(t, rdb, &lock.Options{Watchdog: true})
	other := newLocks(t, srv.Client(), nil)
	ctx := context.Background()
	const ttl = time.Second
	rdb.Ping(ctx) // the client's own goroutines, if any, exist before the snapshot
	before := goleak.IgnoreCurrent()

	l := obtain(t, c, "long", ttl)
	start := time.Now()
	for time.Since(start) < 3*ttl { // hold it for three TTLs, checking as we go
		if _, err := other.Obtain(ctx, "long", time.Second); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("another holder's Obtain after %v: %v", time.Since(start), err)
		}
		notEnded(t, l, "while the watchdog kept it")
		<-time.After(ttl / 4) // the holder's work goes on
	}
	if left, err := l.TTL(ctx); err != nil || left <= 0 {
		t.Fatalf("TTL after three TTLs = %v, %v", left, err)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("the watchdog outlived Release: %v", err)
	}
	next := obtain(t, other, "long", time.Second) // free at once
	if next.Fence() <= l.Fence() {
		t.Fatalf("fence %d after %d", next.Fence(), l.Fence())
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A watchdog that finds the lock gone ends the Lock.
func TestWatchdogLost(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	c := newLocks(t, rdb, &lock.Options{Watchdog: true})
	ctx := context.Background()
	l := obtain(t, c, "lost:{2}", 300*time.Millisecond)
	lockName, _ := taggedNames("2", "lost:{2}")
	rdb.Del(ctx, lockName)
	ended(t, l, prompt, "the watchdog's refresh was refused")
	isErr(t, "Refresh", l.Refresh(ctx, time.Second), lock.ErrNotHeld)
	isErr(t, "Release", l.Release(ctx), lock.ErrNotHeld)
}

// A watchdog whose refreshes can't reach Redis ends the Lock when its
// validity runs out; Release then returns promptly.
func TestWatchdogRedisGone(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := newLocks(t, rdb, &lock.Options{Watchdog: true})
	const ttl = 300 * time.Millisecond
	l := obtain(t, c, "k", ttl)
	p.Blackhole(true)
	ended(t, l, ttl+prompt, "no refresh reached Redis")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := l.Release(ctx); err == nil {
		t.Fatal("Release through a black hole succeeded")
	}
	if took := time.Since(start); took > prompt {
		t.Fatalf("Release took %v", took)
	}
	p.Blackhole(false)
	p.Reset()
}

// Fencing tokens rise across holders, and still rise after the counter is
// lost (evicted, deleted) or the server restarts empty: they fall back on
// the server clock. A counter ahead of the clock wins over it.
func TestFenceCounter(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(func(o *redis.Options) { o.MaxRetries = 5 })
	c := newLocks(t, rdb, nil)
	ctx := context.Background()
	const key = "f:{3}"
	_, counter := taggedNames("3", key)

	var last int64
	next := func(why string) int64 {
		t.Helper()
		l := obtain(t, c, key, time.Second)
		if l.Fence() <= last {
			t.Fatalf("%s: fence %d is not above %d", why, l.Fence(), last)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		last = l.Fence()
		return last
	}
	for range 5 {
		next("the next holder")
	}
	if got := rdb.Get(ctx, counter).Val(); got != itoa(last) {
		t.Fatalf("counter %q, last fence %d", got, last)
	}

	rdb.Del(ctx, counter)
	next("after the counter was deleted")

	ahead := last + 1e12 // the clock fell behind the counter
	rdb.Set(ctx, counter, ahead, 0)
	if f := next("with a counter ahead of the clock"); f != ahead+1 {
		t.Fatalf("fence %d, want the counter + 1 = %d", f, ahead+1)
	}

	if err := srv.Restart(); err != nil { // no persistence: every key is gone
		t.Fatal(err)
	}
	rdb.Ping(ctx) // reconnect
	last = 0      // the clock is behind the counter set above; compare to the clock now
	floor := time.Now().UnixMicro() - int64(time.Second/time.Microsecond)
	if f := next("after a restart without persistence"); f < floor {
		t.Fatalf("fence %d after a restart is below the clock (%d µs)", f, floor)
	}
}

// Bad input is refused with the sentinel errors.
func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()

	_, err := lock.New(nil, nil)
	isErr(t, "New(nil)", err, lock.ErrNilClient)
	_, err = lock.New((*redis.Client)(nil), nil)
	isErr(t, "New(typed nil)", err, lock.ErrNilClient)
	_, err = lock.New(rdb, &lock.Options{Prefix: "a{b"})
	isErr(t, "a Prefix with a brace", err, lock.ErrInvalidOptions)

	c := newLocks(t, rdb, &lock.Options{}) // zero Options: the defaults
	_, err = c.Obtain(ctx, "", time.Second)
	isErr(t, "an empty key", err, lock.ErrInvalidKey)
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond - 1, 2 * time.Millisecond, lock.MinTTL - 1} {
		_, err = c.Obtain(ctx, "k", ttl)
		isErr(t, "Obtain with ttl "+ttl.String(), err, lock.ErrInvalidTTL)
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("bad input left %d keys in Redis", n)
	}

	l := obtain(t, c, "k", time.Second)
	if n := rdb.Exists(ctx, "lock:l:{"+fnvTag("k")+"}:k").Val(); n != 1 {
		t.Fatalf("no lock under the default prefix: keys %v", rdb.Keys(ctx, "*").Val())
	}
	for _, ttl := range []time.Duration{0, -time.Second, lock.MinTTL - 1} {
		isErr(t, "Refresh with ttl "+ttl.String(), l.Refresh(ctx, ttl), lock.ErrInvalidTTL)
	}
	notEnded(t, l, "after a refused Refresh")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A key of another type under the lock's name: Redis's error, wrapped.
	rdb.Set(ctx, "lock:l:{x}:{x}", "not a lock", 0)
	_, err = c.Obtain(ctx, "{x}", time.Second)
	if err == nil || errors.Is(err, lock.ErrNotObtained) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Obtain over a string: %v", err)
	}
}

// An Obtain whose reply is lost with its connection is sent again by the
// client; the script knows its own token and hands out no second fence.
func TestObtainResent(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: 3})
	defer rdb.Close()
	c := newLocks(t, rdb, nil)
	ctx := context.Background()
	const ttl = 123457 * time.Millisecond // a figure that appears only in obtain.lua's reply
	p.CutOnReply([]byte(":123457\r\n"))
	l := obtain(t, c, "r:{5}", ttl)
	_, counter := taggedNames("5", "r:{5}")
	if got := srv.Client().Get(ctx, counter).Val(); got != itoa(l.Fence()) {
		t.Fatalf("counter %s, fence %d: a second fence was handed out", got, l.Fence())
	}
	if left, err := l.TTL(ctx); err != nil || left <= 0 {
		t.Fatalf("TTL = %v, %v", left, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An Obtain whose context ends while its try is on the wire gives up, and
// releases the lock that try may have taken.
func TestObtainAbandoned(t *testing.T) {
	srv := redistest.Start(t)
	p := redistest.StartProxy(t, srv.Addr)
	// Protocol 2 without CLIENT SETINFO: a new connection sends no
	// handshake, so the clean-up's single round trip is all that is slow.
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	c := newLocks(t, rdb, nil)
	warm := obtain(t, c, "warm", time.Second) // the scripts are loaded...
	if err := warm.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.Latency(300 * time.Millisecond) // ...then every reply is slow
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Obtain(ctx, "slow:{6}", time.Minute)
	isErr(t, "Obtain past its deadline", err, lock.ErrNotObtained, context.DeadlineExceeded)
	if took := time.Since(start); took > 100*time.Millisecond+time.Second+prompt {
		t.Fatalf("Obtain returned %v after it started; its deadline was 100ms, the clean-up's 1s", took)
	}
	p.Latency(0)
	lockName, counter := taggedNames("6", "slow:{6}")
	direct := srv.Client()
	if n := direct.Exists(context.Background(), counter).Val(); n != 1 {
		t.Fatal("the try never ran: no fence was handed out")
	}
	if n := direct.Exists(context.Background(), lockName).Val(); n != 0 {
		t.Fatal("the abandoned try's lock is still held")
	}
}
