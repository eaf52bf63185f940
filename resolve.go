package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/failopen"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/recheck"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/watchdog"
	"github.com/corralhq/corral/internal/wire"
)

// The protocol a flight follows with Redis (section 2.5 of docs/design.md):
// ask fetch.lua what to do, then serve the entry, load under the lease
// (lease.go), wait for the holder's notice, or fail open.

// resolve asks Redis what to do about f's key (fetch.lua) until it has an
// answer: a cached value, a load of its own, or another process's load.
// Every iteration but the first waits for a notice or a timer, and all of
// them end with f's context, so the loop is bounded. next is what remains
// to do once the callers have their answer: refresh a value still served,
// or send a commit again.
func (c *Cache) resolve(f *flight) (a answer, next followUp) {
	args := c.askArgs(f)
	token := f.token
	var w waiting
	defer func() {
		c.waitEnded(f, &w, a.err)
		w.close()
	}()
	// Callers leaving do not abandon a fetch (it may take the lease, which
	// must then be handed back); Close does.
	fctx, stop := context.WithCancel(context.WithoutCancel(f.ctx))
	defer stop()
	defer context.AfterFunc(c.ctx, stop)()
	for {
		if err := f.ctx.Err(); err != nil {
			return answer{err: c.closedErr(err)}, nil
		}
		if f.peekErr != nil {
			// The peek found Redis failing: no script ran, fail open at once.
			c.stats.RedisErrors.Add(1)
			return c.failOpen(f, "", f.peekErr)
		}
		f.asked.CompareAndSwap(0, time.Now().UnixNano())
		f.asking.Store(true)
		r, err := c.store.fetch(fctx, f.names, args)
		f.asking.Store(false)
		args.x = c.earlyFactor()
		switch {
		case errors.Is(err, errBadEntry) && args.skip != r.Soft:
			// An entry that does not decode is missing, not Redis failing.
			c.warn.DecodeFailed(f.key, "payload")
			args.skip = r.Soft
			continue
		case err == nil && (r.Kind == wire.Hit || r.Kind == wire.Stale):
			var again bool
			if again, err = c.regroup(fctx, r, &args); again {
				continue
			}
		}
		if err != nil {
			if a, next, done := c.askFailed(f, &w, token, err); done {
				return a, next
			}
			continue
		}
		if a, next, done := c.follow(f, &w, r, token, args.skip); done {
			return a, next
		}
	}
}

// askArgs returns the arguments of f's first fetch.lua (which decides
// XFetch with the peek's draw), with a new lease token, f's from now on,
// whose first byte says how this process announces the end of its loads
// (wire.Announces). A lease it grants, to load over skip or to refresh the
// entry served, is held from the moment its grant is read. A FetchMany's
// key's lease is a member of its batch's group lease, in its key's slot
// (wire.Group), its own lease dying with its group.
func (c *Cache) askArgs(f *flight) fetchArgs {
	m, _ := c.store.mode.Known()
	a := fetchArgs{token: wire.NewToken(m.Mark), leaseTTL: c.opts.LeaseTTL, x: f.how.x, skip: f.how.skip, version: f.how.version}
	if f.load.group != "" {
		a.group = wire.NewGroup(c.opts.Prefix, f.load.group, f.key, c.store.pipe.Cluster(), c.opts.LoadTimeout+4*c.opts.LeaseTTL)
		a.token = wire.Member(a.token, a.group.Name)
	}
	token := a.token
	f.token = token
	a.granted = func(r wire.FetchReply, skip int64, at, asked time.Time) {
		if r.Kind == wire.Hit || r.Kind == wire.Stale {
			skip = r.Soft
		}
		l := &watchdog.Lease{Key: f.names.Lease, Entry: f.names.Entry, Token: token, Seen: skip, Of: f, Asked: asked}
		if g := a.group; g.Name != "" {
			l.Group, l.TTL = &watchdog.Lease{Key: g.Name, Entry: g.Name, Token: g.Token}, g.PX
		}
		c.store.leases.Hold(l, r.Now, at)
	}
	return a
}

// regroup judges the entry fetch.lua served (r) by the group
// invalidations (groups.go): again when fetch.lua is to be asked again,
// args saying to take it as missing (invalidated) or as stale (softly
// invalidated). An error is the records' read's.
func (c *Cache) regroup(ctx context.Context, r wire.FetchReply, args *fetchArgs) (again bool, err error) {
	v, err := c.judge(ctx, r.Born, r.Tags)
	switch {
	case err != nil:
		return false, err
	case v == epochs.Hard && args.skip != r.Soft:
		args.skip = r.Soft
		return true, nil
	case v == epochs.Soft && r.Kind == wire.Hit && args.stale != r.Soft:
		args.stale = r.Soft
		return true, nil
	}
	return false, nil
}

// follow does what fetch.lua's reply r says: serve the entry, load here
// under the lease it granted (seen is the soft expiry of the entry it was
// asked to take as missing), or wait for the process that holds the lease.
// done is false when the flight is to ask again.
func (c *Cache) follow(f *flight, w *waiting, r wire.FetchReply, token string, seen int64) (a answer, next followUp, done bool) {
	switch r.Kind {
	case wire.Hit, wire.Stale:
		a, next = c.served(f, r, token, w.sub != nil)
		return a, next, true
	case wire.Newer:
		// Written by a newer release (its codec version): leave the
		// entry to it (near.go, overNewer).
		return c.overNewer(f, r.Soft), nil, true
	case wire.Refused:
		// No entry, and Redis refuses writes, so nobody can hold the
		// lease: load here (one load per key in this process).
		c.warn.RefusedWrite(r.RefusedBy)
		c.waitEnded(f, w, nil)
		a, next = c.failOpen(f, "", errorf("%w (%s)", ErrWriteRefused, r.RefusedBy))
		return a, next, true
	case wire.Load:
		c.waitEnded(f, w, nil) // the holder gave its lease up: load here
		a, next = c.loadHere(f, &lease{token: token, serverNow: r.Now, micros: r.Micros, at: time.Now(), seen: seen})
		return a, next, true
	}
	// WAIT: another process holds the lease.
	w.leaseEnds, w.holder = time.Now().Add(r.PTTL), r.Holder
	if w.sub == nil {
		// Subscribe, then fetch again: the notice may have gone out
		// between the first fetch and the subscription.
		c.waitStarted(f, w)
		w.sub = c.notify.Subscribe(f.ctx, f.names.Notice)
		f.settled() // a FetchMany's batch need not wait for it (told now, it paces subscriptions too)
		return answer{}, nil, false
	}
	a, done = c.awaitNotice(f, w, r.PTTL)
	return a, nil, done
}

// waiting is what a flight knows of the lease holder it waits for, from
// fetch.lua's first WAIT on.
type waiting struct {
	sub       *notify.Subscription // the key's channel; nil before the first WAIT
	leaseEnds time.Time            // when the holder's lease would expire
	holder    byte                 // how the holder announces (wire.Announces)
	polls     int                  // re-checks made without a notice to wait for
	began     time.Time            // when the wait began
	ended     bool                 // the Observer was told of its end
}

// close stops listening, if w ever did.
func (w *waiting) close() {
	if w.sub != nil {
		w.sub.Close()
	}
}

// askFailed decides what a flight does when fetch.lua failed: done with
// an answer (and what remains to do after it), or, when done is false,
// ask again.
func (c *Cache) askFailed(f *flight, w *waiting, token string, err error) (a answer, next followUp, done bool) {
	if errors.Is(err, ErrPermission) {
		// Loading on every call would hide it: the callers get it.
		c.warn.PermissionDenied(err)
		return answer{err: err}, nil, true
	}
	if c.ctx.Err() != nil {
		return answer{err: ErrClosed}, nil, true
	}
	c.stats.RedisErrors.Add(1)
	if left := time.Until(w.leaseEnds); w.sub != nil && left > 0 && redisFailed(err) {
		// A waiter whose re-check failed: the holder may yet commit (its
		// node is failing over, or paused). Keep listening, and re-check
		// now and then, until its lease would have expired; only then load
		// here.
		a, done = c.awaitNotice(f, w, min(left, recheck.Failed))
		return a, nil, done
	}
	c.waitEnded(f, w, err)
	a, next = c.failOpen(f, token, err)
	return a, next, true
}

// served answers f with the entry fetch.lua served (HIT or STALE); waited
// says that f waited for another process's load first. next is the
// background refresh this caller took the lease for, or nil.
func (c *Cache) served(f *flight, r wire.FetchReply, token string, waited bool) (a answer, next followUp) {
	out := outHit
	switch {
	case waited:
		out = outWaited // found after waiting for another process's load
	case r.Kind == wire.Stale:
		out = outStale
	}
	if r.Refresh {
		next = refresh{&lease{token: token, serverNow: r.Now, micros: r.Micros, at: time.Now(), early: r.Kind == wire.Hit, seen: r.Soft}}
	}
	if r.Refused {
		c.warn.RefusedWrite(r.RefusedBy) // served as is: no refresh while Redis refuses writes
	}
	switch {
	case out == outStale && r.Flags.RefreshFailed:
		out = outStaleIfError
	case r.Flags.Kind == wire.NotFound && !waited:
		out = outNegative
	case r.Flags.Kind == wire.Failure && !waited:
		out = outFailure
	}
	val, err := entryAnswer(r.Payload, r.Flags.Kind)
	return answer{val: val, err: err, out: out, soft: r.Soft}, next
}

// loadHere loads f's key under l, the lease fetch.lua just granted (LOAD),
// unless every caller left meanwhile.
func (c *Cache) loadHere(f *flight, l *lease) (answer, followUp) {
	if !c.flights.StartLoading(f.ctx, f.key, f) {
		// Every caller left while fetch.lua ran: hand the lease back.
		c.releaseLease(f.names, l.token, releaseArgs{notice: wire.Recheck})
		return answer{err: context.Canceled}, nil
	}
	return c.loadAndCommit(f, l, false)
}

// awaitNotice waits for the lease holder's notice, or for the lease's
// remaining time (with jitter: internal/recheck's After) to pass. done is
// false when the flight should fetch again. A waiter that cannot hear the
// holder (no channel rights on either side, the other kind of pub/sub, a
// subscription not confirmed yet) re-checks on its own instead (Poll),
// w.polls counting how often.
func (c *Cache) awaitNotice(f *flight, w *waiting, pttl time.Duration) (a answer, done bool) {
	sub := w.sub
	delay := recheck.After(pttl, c.opts.LeaseTTL, c.opts.Rand())
	hears, pending := sub.Hears(w.holder)
	if !hears {
		delay = min(delay, recheck.Poll(w.polls, c.opts.Rand()))
		w.polls++
	} else if c.onParked != nil {
		c.onParked(f.names.Notice)
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-pending:
		return answer{}, false // subscribed now: fetch again, then wait for the notice
	case n := <-sub.Notices():
		switch n.Kind {
		case wire.NoticeValue:
			return answer{val: n.Value, out: outWaited}, true
		case wire.NoticeBorn:
			c.flights.Drop(f.key, f) // joined by nobody from now: judged for its callers (judgeNotice)
			if v, err := c.judgeNotice(f, n.Born, n.Tags); err == nil && v == epochs.Valid {
				return answer{val: n.Value, out: outWaited}, true
			} // invalidated since the load began (groups.go): fetch again, which decides
		case wire.NoticeNotFound:
			return answer{err: ErrNotFound, out: outWaited}, true
		case wire.NoticeFailed:
			return answer{err: errorf("%w: %s", ErrRemoteLoad, bareText(n.Message)), out: outWaited}, true
		case wire.NoticeTooLarge:
			// Loaded elsewhere but not stored (too large, or an Entry's
			// TTL <= 0): load it here, uncached.
			c.waitEnded(f, w, nil)
			val, _, _, err := c.runLoader(f)
			return answer{val: val, err: err, out: outMiss}, true
		}
		return answer{}, false // committed out of line, revoked or released: fetch again
	case <-timer.C:
		if hears {
			sub.Refresh(f.ctx) // no notice in time: make sure we can still hear one
		}
		return answer{}, false
	case <-f.ctx.Done():
		return answer{err: c.closedErr(f.ctx.Err())}, true
	}
}

// failOpen answers f when Redis failed: with DisableFailOpen the error,
// otherwise from memory (failsafe.go) or the loader's result. When
// fetch.lua was sent but its reply never came (Redis went silent, the
// connection dropped), it may have run and taken the lease for token after
// all: then, once the callers have their answer, the result is committed
// under token (or the lease handed back), so waiters in other processes are
// not left to the lease's expiry. A commit that finds the lease not held by
// token changes nothing.
func (c *Cache) failOpen(f *flight, token string, redisErr error) (answer, followUp) {
	sent := token != "" && !transport.Says(redisErr, transport.Unreachable) && !errors.Is(redisErr, ErrCircuitOpen) // the script may have run
	copies := !errors.Is(redisErr, ErrWriteRefused)                                                                 // Redis answered: no entry
	if redisFailed(redisErr) {
		if a, ok := c.failSafeFrom(f.key, copies); ok {
			if sent {
				return a, handBack{token}
			}
			return a, nil
		}
	}
	if c.opts.DisableFailOpen {
		return answer{err: redisErr}, nil
	}
	if errors.Is(redisErr, ErrCircuitOpen) || errors.Is(redisErr, ErrWriteRefused) {
		// The breaker warned as it opened, and refused writes are warned
		// of apart: no warning per call.
		c.opts.Logger.Debug("corral: calling the loader directly (fail-open)", "key", f.key, errAttr(redisErr))
	} else {
		c.warn.FailOpen(f.key, redisErr)
	}
	open := commitOpen{token: token}
	out := outFailOpen
	if redisFailed(redisErr) {
		var held bool
		if open.val, open.took, open.fr, held, open.err = c.loadOpen(f.ctx, f.key, f.load, copies); held { // one at a time, kept for fail-safe use
			out = outFailSafe
		}
	} else {
		lctx, _ := failopen.Marked(f.ctx)
		open.val, open.took, open.fr, open.err = c.runLoad(lctx, f.key, f.load)
	}
	a := answer{val: open.val, err: open.err, out: out}
	if !sent {
		return a, nil // never sent (refused, or skipped by the breaker): the script never ran
	}
	return a, open
}

// commitOpen is what remains of a fail-open load whose fetch.lua may have
// taken the lease for token (see failOpen): its result to commit under
// it, or the lease to hand back.
type commitOpen struct {
	token string
	val   []byte
	took  time.Duration
	fr    freshness
	err   error
}

func (o commitOpen) run(c *Cache, f *flight) {
	switch val := o.val; {
	case o.err == nil && len(val) <= c.opts.MaxValueBytes && o.fr.stored():
		if val == nil {
			val = []byte{}
		}
		e := c.entry(val, wire.Value, o.fr, o.took)
		e.born = 1 // its load's start on the records' clock is unknown: the earliest, on the safe side
		err := c.tagged(c.drain, e)
		if err == nil {
			_, err = c.store.commit(c.drain, f.names, o.token, e)
		}
		if err != nil {
			c.stats.RedisErrors.Add(1)
		}
	case isNotFound(o.err):
		e := c.entry(nil, wire.NotFound, o.fr, 0)
		e.born = 1
		c.store.commit(c.drain, f.names, o.token, e)
	default:
		notice := wire.Recheck
		if o.err != nil && !errors.Is(o.err, ErrClosed) {
			notice = wire.FailureNotice(o.err)
		}
		if _, err := c.store.release(c.drain, f.names, o.token, releaseArgs{notice: notice}); err != nil {
			c.stats.RedisErrors.Add(1)
		}
	}
}
