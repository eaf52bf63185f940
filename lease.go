package corral

import (
	"github.com/corralhq/corral/internal/wire"

	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// A lease is this process's right, held in Redis as P:l:{T}:K = token with a
// PX expiry, to load a key and commit the result (Nishtala et al., "Scaling
// Memcache at Facebook", NSDI 2013). It is a tool for efficiency, not a lock
// for correctness: a lease that expires or is revoked while the load runs
// only means the commit is rejected.
type lease struct {
	token     string
	serverNow int64     // the server clock (ms) when fetch.lua granted it
	at        time.Time // the local clock when that reply arrived
	early     bool      // taken by XFetch on a fresh entry
}

// serverDeadline estimates the server clock at local time t plus slack. The
// estimate never runs ahead of the server: serverNow was read before the
// reply reached us.
func (l *lease) serverDeadline(slack time.Duration) int64 {
	return l.serverNow + (time.Since(l.at) + slack).Milliseconds()
}

// loadAndCommit runs f's load while a watchdog keeps l alive, then stores
// the result under l (commit.lua) or, when the load failed, hands l back.
// refresh says an entry is still being served (stale-while-revalidate or
// early refresh): a failure then leaves it in place, flagged, and with
// ErrorTTL holds further refreshes off (stale-if-error). The loaded value is
// returned even when the commit is rejected or fails: callers are owed it
// either way. A commit that failed because a Cluster node died is left in
// f.after, to be tried again once the callers have their answer.
func (c *Cache) loadAndCommit(f *flight, l *lease, refresh bool) ([]byte, error) {
	n := f.names
	w := c.watch(n, l)
	val, took, err := c.runLoader(f.ctx, f.load)
	kept := w.halt() // no renewal is sent, or can land, after this

	kind := wire.Value
	switch {
	case err == nil:
		if val == nil {
			val = []byte{}
		}
	case isNotFound(err):
		kind, val = wire.NotFound, []byte{}
	case errors.Is(err, ErrClosed):
		// This process is shutting down: not the origin's failure. Other
		// processes' waiters re-check and take over.
		c.releaseLease(n, l.token, releaseArgs{notice: wire.Recheck})
		return nil, err
	case refresh:
		c.releaseLease(n, l.token, releaseArgs{notice: wire.FailureNotice(err), hold: c.opts.ErrorTTL, mark: true})
		return nil, err
	case c.opts.ErrorTTL > 0:
		kind, val = wire.Failure, []byte(wire.FailureMessage(err))
	default:
		c.releaseLease(n, l.token, releaseArgs{notice: wire.FailureNotice(err)})
		return nil, err
	}
	e := c.entry(val, kind, f.ttl, took)
	stored, cerr := c.store.commit(c.bounded(), n, l.token, e)
	switch {
	case cerr != nil && c.store.reload != nil && redisFailed(cerr):
		f.after = func() { c.recommit(n, l.token, e) }
	case cerr != nil:
		c.commitFailed(n, l.token, cerr)
	case !stored:
		c.stats.commitsRejected.Add(1)
		if kept {
			c.stats.leasesLost.Add(1)
		}
		c.opts.Logger.Info("corral: commit rejected: the lease was revoked or taken over during the load", "key", n.Entry)
	}
	if kind != wire.Value {
		return nil, err
	}
	return val, nil
}

// commitFailed hands the lease back after a commit failed: the load worked,
// only storing it did not, so other processes' waiters re-check rather than
// fail.
func (c *Cache) commitFailed(n wire.Names, token string, err error) {
	c.stats.redisErrors.Add(1)
	c.opts.Logger.Warn("corral: storing a load's result failed; callers still get it", "key", n.Entry, "err", err)
	c.releaseLease(n, token, releaseArgs{notice: wire.Recheck})
}

// recommit tries again, for a while, a commit that failed because a Cluster
// node died: the slot map is being reloaded, and once the replica that took
// over is known, the commit lands there (the lease was replicated to it) and
// its notice reaches the waiters, which have moved there too (notify.go).
func (c *Cache) recommit(n wire.Names, token string, e entryWrite) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var err error
	for end := time.Now().Add(revalidateFor); time.Now().Before(end); {
		select {
		case <-tick.C:
		case <-c.ctx.Done():
			return
		}
		var stored bool
		stored, err = c.store.commit(c.bounded(), n, token, e)
		if err == nil {
			if !stored {
				c.stats.commitsRejected.Add(1)
			}
			return
		}
		if !redisFailed(err) {
			break
		}
	}
	c.commitFailed(n, token, err)
}

// runLoader runs load under context.WithoutCancel(parent), bounded by
// LoadTimeout and cancelled by Close. A panic becomes a *PanicError. A loader
// still running at the deadline is abandoned: its late result is dropped.
func (c *Cache) runLoader(parent context.Context, load func(context.Context) ([]byte, error)) (val []byte, took time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), c.opts.LoadTimeout)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()

	type result struct {
		val []byte
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	c.stats.loads.Add(1)
	go func() {
		returned := false
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: &PanicError{Value: p, Stack: debug.Stack()}}
			} else if !returned {
				done <- result{err: errLoaderExited}
			}
		}()
		v, err := load(ctx)
		returned = true
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		val, err = r.val, r.err
	case <-ctx.Done():
		if c.ctx.Err() != nil {
			err = ErrClosed
		} else {
			err = errors.Join(fmt.Errorf("%w after %v", ErrLoadTimeout, c.opts.LoadTimeout), context.DeadlineExceeded)
		}
	}
	took = time.Since(start)
	if err != nil && !isNotFound(err) && !errors.Is(err, ErrClosed) {
		c.stats.loadErrors.Add(1)
	}
	return val, took, err
}

// isNotFound reports whether a loader said "no such record": it returned
// ErrNotFound or wrapped it. A panic carrying ErrNotFound is a failure.
func isNotFound(err error) bool {
	var pe *PanicError
	return errors.Is(err, ErrNotFound) && !errors.As(err, &pe)
}

// errLoaderExited is the error of a loader that called runtime.Goexit (for
// example through t.FailNow) instead of returning.
var errLoaderExited = errors.New("corral: loader exited without returning (runtime.Goexit)")

// refreshInBackground reloads a key whose entry is still served (stale, or
// fresh and picked by XFetch) under lease l, after the flight has answered
// its callers. At most MaxBackgroundRefreshes run at once; past that the
// lease is handed back and the old value stays.
func (c *Cache) refreshInBackground(f *flight, l *lease) {
	select {
	case c.refreshSlots <- struct{}{}:
		defer func() { <-c.refreshSlots }()
	default:
		c.releaseLease(f.names, l.token, releaseArgs{})
		return
	}
	c.stats.refreshes.Add(1)
	if l.early {
		c.stats.earlyRefreshes.Add(1)
	}
	_, err := c.loadAndCommit(f, l, true)
	if f.after != nil {
		f.after()
	}
	if err != nil && !isNotFound(err) && !errors.Is(err, ErrClosed) {
		c.stats.refreshErrors.Add(1)
		c.opts.Logger.Warn("corral: background refresh failed; the current value stays", "key", f.key, "err", err)
	}
}

// releaseLease hands a lease back (release.lua).
func (c *Cache) releaseLease(n wire.Names, token string, a releaseArgs) {
	if _, err := c.store.release(c.bounded(), n, token, a); err != nil {
		c.stats.redisErrors.Add(1)
		c.opts.Logger.Warn("corral: releasing a lease failed; it expires within LeaseTTL", "key", n.Lease, "err", err)
	}
}

// bounded is the context of writes that must happen even when callers left or
// the Cache is closing (commits, releases): each call is still bounded by
// RedisTimeout.
func (c *Cache) bounded() context.Context {
	return context.WithoutCancel(c.ctx)
}

// watchdog renews a lease every LeaseTTL/3 while its load runs.
type watchdog struct {
	stop chan struct{}
	done chan struct{}
	lost bool // set by the watchdog goroutine; read after done is closed
}

func (c *Cache) watch(n wire.Names, l *lease) *watchdog {
	w := &watchdog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(c.opts.LeaseTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			// A renewal that reaches the server after we stop waiting for it
			// must not extend the lease: renew.lua drops it past this deadline.
			deadline := l.serverDeadline(c.opts.RedisTimeout)
			res, err := c.store.renew(c.bounded(), n, l.token, c.opts.LeaseTTL, deadline)
			switch {
			case err != nil:
				c.stats.redisErrors.Add(1)
				c.opts.Logger.Warn("corral: lease renewal failed; retrying on the next tick", "key", n.Lease, "err", err)
			case res == renewNot:
				w.lost = true
				c.stats.leasesLost.Add(1)
				c.opts.Logger.Warn("corral: lease lost during a load; its result will not be stored", "key", n.Lease)
				return
			case res == renewLate:
				c.opts.Logger.Warn("corral: lease renewal reached Redis too late and was dropped; retrying", "key", n.Lease)
			}
		}
	}()
	return w
}

// halt stops the watchdog and waits for it, including a renewal in flight.
// It reports whether the lease was still held at the last renewal.
func (w *watchdog) halt() bool {
	close(w.stop)
	<-w.done
	return !w.lost
}
