package lock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The protocol is in the .lua files; this file sends them.
var (
	//go:embed scripts/obtain.lua
	obtainSrc string
	//go:embed scripts/refresh.lua
	refreshSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/ttl.lua
	ttlSrc string

	obtainScript  = redis.NewScript(obtainSrc)
	refreshScript = redis.NewScript(refreshSrc)
	releaseScript = redis.NewScript(releaseSrc)
	ttlScript     = redis.NewScript(ttlSrc)
)

// Client obtains locks on one Redis deployment: a single server, a master
// managed by Sentinel, or a Cluster. It is safe for concurrent use and owns
// nothing that needs closing.
type Client struct {
	rdb  redis.UniversalClient
	opts Options
}

// New returns a Client that obtains locks through rdb. opts may be nil for
// all defaults.
func New(rdb redis.UniversalClient, opts *Options) (*Client, error) {
	if rdb == nil {
		return nil, ErrNilClient
	}
	if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, ErrNilClient // a typed nil, such as (*redis.Client)(nil)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{rdb: rdb, opts: o}, nil
}

// names are the Redis names of one lock key (see the package doc).
type names struct {
	lock, counter string
}

func (c *Client) names(key string) names {
	tag := wire.SlotTag(key)
	return names{
		lock:    c.opts.Prefix + ":l:{" + tag + "}:" + key,
		counter: c.opts.Prefix + ":f:{" + tag + "}:" + key,
	}
}

// abandonTimeout bounds the clean-up after an Obtain whose try failed with
// an error: that try may have taken the lock all the same.
const abandonTimeout = time.Second

// Obtain takes the lock named key for ttl and returns it with a fencing
// token larger than any earlier holder's (see the package doc for when that
// holds). While another holder has the lock, Obtain follows Options.Retry:
// it waits and tries again, or gives up with an error that wraps
// ErrNotObtained, also when ctx ends first (the error then matches ctx.Err()
// too). Redis errors are returned at once, wrapped. A try that failed, or
// that was on its way when ctx ended, may have taken the lock all the same:
// Obtain then releases it before returning, which takes at most a second
// more (past ctx's end too), or it expires after ttl.
//
// ttl must be at least MinTTL; it is rounded down to whole milliseconds.
// A key may be any non-empty string, binary included, up to Redis's limit
// (512 MB), and errors quote at most its first 64 bytes. A nil ctx panics,
// here and in Lock's methods. Locks are not reentrant: a second Obtain of a
// held key waits like any other, whoever asks.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	mustContext(ctx)
	if key == "" {
		return nil, ErrInvalidKey
	}
	if ttl < MinTTL {
		return nil, fmt.Errorf("%w: %v (at least %v)", ErrInvalidTTL, ttl, MinTTL)
	}
	n := c.names(key)
	token := newToken()
	for tries := 1; ; tries++ {
		if err := ctx.Err(); err != nil {
			return nil, notObtained(key, tries-1, err)
		}
		sent := time.Now()
		res, err := obtainScript.Run(ctx, c.rdb, []string{n.lock, n.counter}, token, ttl.Milliseconds()).Int64Slice()
		if err == nil && (len(res) == 0 || res[0] == 1 && len(res) < 3 || res[0] == 0 && len(res) < 2) {
			err = fmt.Errorf("unexpected reply %v from obtain.lua", res)
		}
		if err != nil {
			c.abandon(ctx, n, token)
			if ctx.Err() != nil {
				return nil, notObtained(key, tries, ctx.Err())
			}
			return nil, fmt.Errorf("lock: obtain %s: %w", quote(key), err)
		}
		if res[0] == 1 {
			return c.newLock(key, n, token, res[1], ttl, sent), nil
		}
		wait, again := c.opts.Retry(tries)
		if !again {
			return nil, fmt.Errorf("%w: %s is held by another holder (%d tries)", ErrNotObtained, quote(key), tries)
		}
		if res[1] >= 0 { // the holder's lock expires in res[1] ms (rounded down)
			wait = min(wait, time.Duration(res[1]+1)*time.Millisecond) // free then, unless refreshed
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, notObtained(key, tries, ctx.Err())
		}
	}
}

// mustContext panics on a nil ctx, as the standard library does, with a
// message that says where.
func mustContext(ctx context.Context) {
	if ctx == nil {
		panic("lock: nil Context")
	}
}

func notObtained(key string, tries int, cause error) error {
	return fmt.Errorf("%w: %s: gave up after %d tries: %w", ErrNotObtained, quote(key), tries, cause)
}

// abandon releases the lock if a failed try took it after all, so it does
// not stay held, by nobody, until its TTL runs out.
func (c *Client) abandon(ctx context.Context, n names, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	_ = releaseScript.Run(ctx, c.rdb, []string{n.lock}, token).Err()
}

// newToken returns a random 128-bit token in hex: the holder's identity,
// which no other holder can guess.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

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

// validity is how long after sending the request that set a lock's TTL the
// lock surely still holds, clock drift allowed for.
func validity(ttl time.Duration) time.Duration {
	return ttl - ttl/100 - 2*time.Millisecond
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

// watch is the watchdog: it refreshes the lock every third of its TTL until
// ctx is cancelled (Release) or the Lock ends. A refresh that fails on a
// Redis error is tried again on the next tick; if none lands in time, the
// validity timer ends the Lock.
func (l *Lock) watch(ctx context.Context) {
	defer close(l.watching)
	tick := time.NewTicker(max(l.ttl/3, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-tick.C:
		}
		sent := time.Now()
		l.mu.Lock()
		until := l.deadline
		l.mu.Unlock()
		rctx, cancel := context.WithDeadline(ctx, until) // no use after the validity
		ok, err := l.refresh(rctx, l.ttl)
		cancel()
		switch {
		case err != nil:
			continue
		case !ok:
			l.end()
			return
		default:
			l.extend(sent, l.ttl)
		}
	}
}

// halt stops the watchdog, if any, and waits until it has returned,
// including a refresh it had in flight.
func (l *Lock) halt() {
	if l.stop == nil {
		return
	}
	l.haltOnce.Do(func() {
		l.stop()
		<-l.watching
	})
}

// extend moves the validity to start at sent, when a refresh sent then to
// ttl has landed. It reports false if the Lock has ended.
func (l *Lock) extend(sent time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	if sent.Before(l.basis) {
		return true // a later request has set the TTL already
	}
	l.basis, l.deadline = sent, sent.Add(validity(ttl))
	l.timer.Reset(time.Until(l.deadline))
	return true
}

// lapse runs when the validity timer fires: the Lock ends unless a refresh
// has moved the validity on meanwhile.
func (l *Lock) lapse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if left := time.Until(l.deadline); left > 0 {
		l.timer.Reset(left)
		return
	}
	l.endLocked()
}

func (l *Lock) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked()
}

func (l *Lock) endLocked() {
	if l.ended {
		return
	}
	l.ended = true
	l.timer.Stop()
	close(l.done)
}

func (l *Lock) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}
