package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A Lock is one holder's hold on a lock key, from Obtain to Release. Its
// methods are safe for concurrent use.
//
// A Lock's validity is its TTL less a clock-drift allowance of 1% of the
// TTL plus 2 ms (the allowance the Redis documentation suggests for Redlock,
// "Distributed Locks with Redis"), counted from when the request that
// obtained or last refreshed it was sent: Redis cannot have expired it
// sooner, unless its clock runs faster than that. When the validity runs
// out, when Redis says the lock is no longer this holder's, or on Release,
// the Lock ends: Done closes, and Refresh returns ErrNotHeld from then on.
type Lock struct {
	c     *Client
	key   string
	n     names
	token string
	fence int64
	ttl   time.Duration

	done chan struct{}

	mu       sync.Mutex // guards the fields below
	ended    bool       // done is closed
	basis    time.Time  // when the request that set deadline was sent
	deadline time.Time  // the end of the validity
	timer    *time.Timer

	haltOnce sync.Once
	stop     context.CancelFunc // stops the watchdog; nil without one
	watching chan struct{}      // closed when the watchdog has returned
}

func (c *Client) newLock(key string, n names, token string, fence int64, ttl time.Duration, sent time.Time) *Lock {
	l := &Lock{c: c, key: key, n: n, token: token, fence: fence, ttl: ttl, done: make(chan struct{})}
	l.mu.Lock()
	l.basis, l.deadline = sent, sent.Add(validity(ttl))
	l.timer = time.AfterFunc(time.Until(l.deadline), l.lapse)
	l.mu.Unlock()
	if c.opts.Watchdog {
		ctx, stop := context.WithCancel(context.Background())
		l.stop, l.watching = stop, make(chan struct{})
		go l.watch(ctx)
	}
	return l
}

// Key returns the key the lock was obtained for.
func (l *Lock) Key() string { return l.key }

// Fence returns the lock's fencing token: larger than the token of every
// earlier holder of this key while the counter in Redis survives (see the
// package doc). Send it with every write to the resource the lock guards,
// and have the resource refuse a write whose token is smaller than the
// largest it has seen.
func (l *Lock) Fence() int64 { return l.fence }

// Done returns a channel that is closed when the Lock ends: on Release, when
// its validity runs out (without the watchdog: when its TTL is nearly over
// and no Refresh extended it), or when Refresh, TTL or the watchdog learns
// from Redis that the lock is no longer this holder's. A holder stops using
// the resource when Done closes.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Refresh gives the lock a new TTL, counted from now, if this holder still
// has it. It returns an error wrapping ErrNotHeld when Redis says the lock
// is no longer this holder's (the lock is left as it is, and the Lock ends),
// or when the Lock has already ended. A Redis error is returned wrapped and
// leaves the Lock as it was. ttl must be at least MinTTL. With
// Options.Watchdog, the watchdog keeps refreshing to the TTL given to
// Obtain.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	mustContext(ctx)
	if ttl < MinTTL {
		return fmt.Errorf("%w: %v (at least %v)", ErrInvalidTTL, ttl, MinTTL)
	}
	if l.isEnded() {
		return fmt.Errorf("%w: %s: this Lock has ended (released, lost or past its validity)", ErrNotHeld, quote(l.key))
	}
	sent := time.Now()
	ok, err := l.refresh(ctx, ttl)
	switch {
	case err != nil:
		return fmt.Errorf("lock: refresh %s: %w", quote(l.key), err)
	case !ok:
		l.end()
		return fmt.Errorf("%w: %s: expired or taken by another holder", ErrNotHeld, quote(l.key))
	case !l.extend(sent, ttl):
		return fmt.Errorf("%w: %s: this Lock ended while the refresh was on its way", ErrNotHeld, quote(l.key))
	}
	return nil
}

func (l *Lock) refresh(ctx context.Context, ttl time.Duration) (bool, error) {
	n, err := refreshScript.Run(ctx, l.c.rdb, []string{l.n.lock}, l.token, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// Release frees the lock if this holder still has it, and ends the Lock in
// any case. It stops the watchdog first, and waits for it: no refresh is
// sent once Release has begun, and none is left in flight when it returns.
// It returns an error wrapping ErrNotHeld when the lock was not this
// holder's any more (released before, expired, or taken by another holder,
// whose lock is left untouched), and a wrapped Redis error if Redis did not
// answer (the lock then expires after its TTL).
func (l *Lock) Release(ctx context.Context) error {
	mustContext(ctx)
	l.halt()
	l.end()
	n, err := releaseScript.Run(ctx, l.c.rdb, []string{l.n.lock}, l.token).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("lock: release %s: %w", quote(l.key), err)
	case n != 1:
		return fmt.Errorf("%w: %s: already released, expired or taken by another holder", ErrNotHeld, quote(l.key))
	}
	return nil
}

// TTL returns how long the lock has left in Redis, if this holder still has
// it; otherwise an error wrapping ErrNotHeld, and the Lock ends. It asks
// Redis even after the Lock has ended. A negative duration means the lock
// has no expiry (changed by something other than this package).
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	mustContext(ctx)
	res, err := ttlScript.Run(ctx, l.c.rdb, []string{l.n.lock}, l.token).Int64Slice()
	switch {
	case err != nil:
		return 0, fmt.Errorf("lock: ttl %s: %w", quote(l.key), err)
	case len(res) == 0 || res[0] == 1 && len(res) < 2:
		return 0, fmt.Errorf("lock: ttl %s: unexpected reply %v from ttl.lua", quote(l.key), res)
	case res[0] != 1:
		l.end()
		return 0, fmt.Errorf("%w: %s: expired or taken by another holder", ErrNotHeld, quote(l.key))
	}
	return time.Duration(res[1]) * time.Millisecond, nil
}
