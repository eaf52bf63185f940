package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/recheck"
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
	var w waiting
	defer func() {
		c.waitEnded(f, &w, a.err)
		w.close()
	}()
	if f.how.listen && f.peekErr == nil {
		// Contended: likely to wait. Listen while the first fetch.lua is
		// out, which says whether we were listening in time (its echo,
		// published by the token's mark: the pub/sub mode, known now).
		w.sub = c.notify.Listen(f.ctx, f.names.Notice, true)
	}
	args := c.askArgs(f)
	token := f.token
	if w.sub != nil {
		args.echo = w.sub.Echo()
	}
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
		w.mark = w.sub.Mark() // what its WAIT will be judged by (nothing before it listens)
		r, err := c.ask(fctx, f, &w, args)
		args.x, args.echo = c.earlyFactor(), ""
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

// ask sends f's fetch.lua with args; its reply sets w's clock (w.sent,
// w.now).
func (c *Cache) ask(ctx context.Context, f *flight, w *waiting, args fetchArgs) (wire.FetchReply, error) {
	f.asked.CompareAndSwap(0, time.Now().UnixNano())
	f.asking.Store(true)
	defer f.asking.Store(false)
	sent := near.Clock()
	r, err := c.store.fetch(ctx, f.names, args)
	if err == nil {
		w.sent, w.now = sent, r.Now
	}
	return r, err
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
		a, next = c.served(f, r, token, w)
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
	if w.began.IsZero() {
		c.waitStarted(f, w)
		f.settled() // a FetchMany's batch need not wait for it (told now, it paces subscriptions too)
		if w.sub == nil {
			w.sub = c.notify.Listen(f.ctx, f.names.Notice, false)
		}
		if w.inTime = w.sub.InTime(f.ctx, r.Heard); !w.inTime {
			// Fetch again: the notice may have gone out between fetch.lua
			// and the subscription.
			return answer{}, nil, false
		}
		w.sub.ExpectEcho(w.mark) // heard, and lost if never read: a NoticeRecheck
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
	inTime    bool                 // sub was on before the wait began (its echo was heard)
	mark      notify.Mark          // what sub had proven when the last fetch.lua was sent
	ended     bool                 // the Observer was told of its end
	// The last fetch.lua answered: when it was sent (near.Clock), and the
	// server's clock when it ran (ms), by which a soft expiry is a time
	// here (near.Until).
	sent, now int64
}

// until is when, here, an entry of soft expiry soft (server ms) goes
// stale, by w's last fetch.lua: 0 for soft 0 (not known).
func (w *waiting) until(soft int64) int64 {
	if soft == 0 {
		return 0
	}
	return near.Until(w.sent, soft, w.now)
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
	if left := time.Until(w.leaseEnds); !w.began.IsZero() && left > 0 && redisFailed(err) {
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

// served answers f with the entry fetch.lua served (HIT or STALE), f's
// wait w having begun if f waited for another process's load first. next
// is the background refresh this caller took the lease for, or nil.
func (c *Cache) served(f *flight, r wire.FetchReply, token string, w *waiting) (a answer, next followUp) {
	waited := !w.began.IsZero()
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
	until := r.Soft
	if r.Kind == wire.Stale {
		until = r.Hard // stale-while-revalidate: served stale until its window ends
	}
	return answer{val: val, err: err, out: out, soft: r.Soft, until: w.until(until)}, next
}

// loadHere loads f's key under l, the lease fetch.lua just granted (LOAD),
// unless every caller left meanwhile.
func (c *Cache) loadHere(f *flight, l *lease) (answer, followUp) {
	if !c.flights.StartLoading(f.ctx, f.key, f) {
		// Every caller left, or Close began, while fetch.lua ran: hand the
		// lease back.
		c.releaseLease(f.names, l.token, releaseArgs{notice: wire.Recheck})
		return answer{err: c.closedErr(context.Canceled)}, nil
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
	hears, pending := sub.Hears(w.holder, w.inTime, w.mark)
	w.inTime = false // the echo vouches for the wait its fetch.lua began, not for later ones
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
				return answer{val: n.Value, out: outWaited, until: w.until(n.Soft)}, true
			} // invalidated since the load began (groups.go): fetch again, which decides
		case wire.NoticeNotFound:
			return answer{err: ErrNotFound, out: outWaited, until: w.until(n.Soft)}, true
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
