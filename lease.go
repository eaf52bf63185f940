package corral

import (
	"errors"
	"time"

	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/tasks"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/watchdog"
	"github.com/corralhq/corral/internal/wire"
)

// A lease is this process's right, held in Redis as P:l:{T}:K = token with a
// PX expiry, to load a key and commit the result (Nishtala et al., "Scaling
// Memcache at Facebook", NSDI 2013). It is a tool for efficiency, not a lock
// for correctness: a lease that expires or is revoked while the load runs
// only means the commit is rejected. A lease evicted while the load runs
// (Redis under maxmemory) was not revoked: its holder takes it again when it
// renews, and its commit stands if nothing was stored meanwhile.
type lease struct {
	token     string
	serverNow int64     // the server clock (ms) when fetch.lua granted it
	micros    int64     // the same, in microseconds (the b of the entry it writes)
	at        time.Time // the local clock when that reply arrived
	early     bool      // taken by XFetch on a fresh entry
	// seen is the soft expiry (server ms) of the entry the lease was taken
	// over, 0 for none: an entry that still has it after an eviction tells
	// commit.lua that nothing was stored since.
	seen int64
}

// serverAt estimates the server clock (ms) at local time t, never ahead
// of it (watchdog.ServerAt); 0 for the zero time.
func (l *lease) serverAt(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return watchdog.ServerAt(l.serverNow, l.at, t)
}

// leasedLoad is runLoader for f, which holds its key's lease, unless a
// fail-open load of the key is under way in this process, or ended less
// than RedisTimeout ago (a caller rescued before its deadline while Redis
// was silent, or calls while it was down; it has answered since): that
// load's value is then f's, committed under the lease, rather than the
// origin asked again as Redis comes back. Not when its loader asked
// IsFailOpen (it may have returned what it would not have had stored), nor
// when it failed (the next load tries again). A Delete or Set of the key
// since drops it (forget). out is how the value answers f's callers: by
// f's own load (outMiss), or by that fail-open load, which another call
// ran (outCoalesced).
func (c *Cache) leasedLoad(f *flight) (out outcome, val []byte, took time.Duration, fr freshness, err error) {
	if o := c.opens.Get(f.key); o != nil {
		select {
		case <-o.Done():
			if r := o.Result; !r.asked && (r.err == nil || isNotFound(r.err)) {
				return outCoalesced, r.val, r.took, r.fr, r.err
			}
		case <-c.loads.Done():
			return outNone, nil, 0, freshness{}, ErrClosed
		}
	}
	val, took, fr, err = c.runLoader(f)
	return outMiss, val, took, fr, err
}

// loadAndCommit runs f's load while a watchdog keeps l alive, then stores
// the result under l (commit.lua) or, when the load failed, hands l back.
// refresh says an entry is still being served (stale-while-revalidate or
// early refresh): a failure then leaves it in place, flagged, and with
// ErrorTTL holds further refreshes off (stale-if-error). The loaded value is
// returned even when the commit is rejected or fails: callers are owed it
// either way, with its outcome (leasedLoad's). A commit that got no answer
// from Redis is sent again once the callers have their answer: that is
// next, nil when nothing remains to do.
func (c *Cache) loadAndCommit(f *flight, l *lease, refresh bool) (a answer, next followUp) {
	n := f.names
	born := c.groups.BornAt(f.ctx, l.micros) // before the load: group invalidations after it reach what it loads
	out, val, took, fr, err := c.leasedLoad(f)
	returned := near.Clock()
	kept, renewed, ends := c.store.leases.Halt(l.token) // no renewal is sent, or can land, after this

	kind := wire.Value
	switch {
	case err == nil:
		if val == nil {
			val = []byte{}
		}
		if len(val) > c.opts.MaxValueBytes {
			c.tooLarge(n, l.token, len(val))
			return answer{val: val, out: out, until: fr.until(returned, fr.soft)}, nil
		}
		if !fr.stored() {
			c.uncached(n, l.token)
			return answer{val: val, out: out, until: returned}, nil // its TTL ended as it returned: not for the callers who join after
		}
	case isNotFound(err):
		kind, val = wire.NotFound, []byte{}
	case errors.Is(err, ErrClosed):
		// This process is shutting down: not the origin's failure. Other
		// processes' waiters re-check and take over.
		c.releaseLease(n, l.token, releaseArgs{notice: wire.Recheck})
		return answer{err: err}, nil // no answer: Close's error (Stats.Errors)
	case refresh:
		c.releaseLease(n, l.token, releaseArgs{notice: wire.FailureNotice(err), hold: c.opts.ErrorTTL, mark: true})
		return answer{err: err, out: out}, nil
	case c.opts.ErrorTTL > 0:
		kind, val = wire.Failure, []byte(wire.FailureMessage(err))
	default:
		c.releaseLease(n, l.token, releaseArgs{notice: wire.FailureNotice(err)})
		return answer{err: err, out: out}, nil
	}
	e := c.entry(val, kind, fr, took)
	e.born = born
	if !kept {
		// The watchdog found the lease held by another, or revoked: the
		// commit would be rejected, or, should the lease be missing by now,
		// taken for an evicted lease's and stored after a Delete.
		c.rejected(f, false)
	} else if terr := c.tagged(c.drain, e); terr != nil {
		c.commitFailed(n, l.token, terr) // not stored: its tags' records might not outlive it
	} else {
		next = c.commit(f, holder{token: l.token, deadline: ends, seen: l.seen, softBy: l.serverAt(e.expires)}, e, renewed)
	}
	until := returned + int64(e.soft) // for the callers who join while it commits
	if kind != wire.Value {
		return answer{err: err, out: out, until: until}, next
	}
	return answer{val: val, out: out, until: fr.until(returned, e.soft)}, next
}

// commit stores the result of f's load under its lease (commit.lua).
// renewed is when the lease was last granted or renewed (local clock). It
// returns the commit to send again, once the callers have their answer, or
// nil.
func (c *Cache) commit(f *flight, h holder, e entryWrite, renewed time.Time) followUp {
	n := f.names
	res, err := c.store.commitHeld(c.drain, n, h, e)
	switch {
	case errors.Is(err, ErrWriteRefused):
		// Counted and warned of by the store; the lease was handed back
		// and the waiters told.
	case err != nil && redisFailed(err):
		// Redis did not answer, or the connection failed: the commit may yet
		// land while the lease lives, and is precious, since waiters in other
		// processes are owed it.
		c.stats.RedisErrors.Add(1)
		return recommit{h: h, e: e, until: renewed.Add(c.opts.LeaseTTL)}
	case err != nil:
		c.commitFailed(n, h.token, err)
	case res == wire.CommitEvicted:
		c.warn.Evicted(n.Lease, "commit")
	case res == wire.CommitRejected:
		c.rejected(f, true)
	}
	return nil
}

// rejected counts and logs a commit of f's load rejected because its lease
// was gone. kept says the watchdog had not seen the lease lost, so the
// lease counts as lost now.
func (c *Cache) rejected(f *flight, kept bool) {
	if kept {
		c.stats.LeasesLost.Add(1)
		c.observe(f.ctx, EventLeaseLost, f.key)
	}
	c.stats.CommitsRejected.Add(1)
	c.observe(f.ctx, EventCommitRejected, f.key)
	c.opts.Logger.Info("corral: commit rejected: the lease was revoked or taken over during the load", "key", f.names.Entry)
}

// commitFailed hands the lease back after a commit failed: the load worked,
// only storing it did not, so other processes' waiters re-check rather than
// fail.
func (c *Cache) commitFailed(n wire.Names, token string, err error) {
	c.warn.CommitFailed(n.Entry, err) // a right denied is logged once, and Health says so
	c.releaseLease(n, token, releaseArgs{notice: wire.Recheck})
}

// recommit is a commit to send again: the write e under h, until the
// lease has surely expired.
type recommit struct {
	h     holder
	e     entryWrite
	until time.Time
}

// run sends the commit again, with a pause growing to 250ms, until it lands
// or is rejected, or until the lease has surely expired (until), or Close
// ends it. Redis may have stalled (a pause, a fork), or a Cluster node died
// and its replica, which has the lease, is being promoted: the commit then
// lands there, and its notice reaches the waiters, which have moved there
// too (internal/notify). Each try is bounded by RedisTimeout. commit.lua
// knows a try that landed although its reply was lost (the entry keeps the
// token). A commit whose connection keeps failing (a server that drops a
// value over its proto-max-bulk-len, say) is tried at most
// maxBrokenCommits times.
func (r recommit) run(c *Cache, f *flight) {
	const maxBrokenCommits = 3
	n, h, e, broken, err := f.names, r.h, r.e, 1, error(nil)
	_, done, closed := tasks.Retry(c.drain, r.until, 50*time.Millisecond, 250*time.Millisecond, func() bool {
		c.stats.CommitRetries.Add(1)
		var res wire.Commit
		res, err = c.store.commitHeld(c.drain, n, h, e)
		switch {
		case err == nil && res == wire.CommitEvicted:
			c.warn.Evicted(n.Lease, "commit")
		case err == nil && res == wire.CommitRejected:
			c.rejected(f, false)
		case err == nil || errors.Is(err, ErrWriteRefused):
		case !redisFailed(err):
			c.commitFailed(n, h.token, err)
		default:
			if !errors.Is(err, ErrRedisTimeout) && !errors.Is(err, ErrCircuitOpen) && !transport.Says(err, transport.Unreachable) {
				broken++ // the connection failed under the commit, not before it
			}
			c.stats.RedisErrors.Add(1)
			return broken >= maxBrokenCommits
		}
		return true
	})
	if closed || done && broken < maxBrokenCommits {
		return // landed, or settled; or closing: the lease expires on its own
	}
	c.warn.NotStored(n.Entry, err)
	c.releaseLease(n, h.token, releaseArgs{notice: wire.Recheck})
}

// tooLarge hands back a lease whose load returned a value over
// MaxValueBytes: it is not stored, and waiters elsewhere are told to load it
// themselves. The first time for a key, it logs a warning.
func (c *Cache) tooLarge(n wire.Names, token string, size int) {
	c.warn.TooLarge(n.Entry, size, c.opts.MaxValueBytes)
	c.releaseLease(n, token, releaseArgs{notice: wire.TooLarge})
}

// uncached hands back a lease whose load returned an Entry with a TTL <= 0:
// its value is not stored, and waiters elsewhere are told to load it
// themselves, as for a value over MaxValueBytes (but nothing is wrong, so
// nothing is logged).
func (c *Cache) uncached(n wire.Names, token string) {
	c.stats.Uncached.Add(1)
	c.releaseLease(n, token, releaseArgs{notice: wire.TooLarge})
}

// handBack is a lease to hand back, with a notice to re-check: fetch.lua
// may have taken it for token although its reply never came (failOpen).
type handBack struct{ token string }

func (h handBack) run(c *Cache, f *flight) {
	c.releaseLease(f.names, h.token, releaseArgs{notice: wire.Recheck})
}

// releaseLease hands a lease back (release.lua).
func (c *Cache) releaseLease(n wire.Names, token string, a releaseArgs) {
	if _, err := c.store.release(c.drain, n, token, a); err != nil {
		c.warn.ReleaseFailed(n.Lease, err)
	}
}

// renewalHeard counts, observes or logs what a renewal of a lease found,
// but for a plain renewal (internal/warn's Renewal).
func (c *Cache) renewalHeard(l *watchdog.Lease, r watchdog.Reply) {
	if f, ok := l.Of.(*flight); c.warn.Renewal(l.Key, r.Res, denied(r.Err)) && ok {
		c.observe(f.ctx, EventLeaseLost, f.key)
	}
}
