package transport

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// A node found down. Some evidence says a node cannot be used at all, not
// merely that it is slow: the probe connection's dial refused (the server
// is gone, or a partition resets connections), a silence past the stall
// bound (liveness.go), or the client's connections refused at AUTH (a wrong
// or rotated password). Such evidence trips the node's breaker at once
// (breaker.go) and fails the node's batches in flight, so that every op
// fails within a millisecond or two, whatever the client's own retries
// (go-redis's defaults retry a refused dial for seconds): the Cache then
// answers from its memory, or fails open. A node that accepts connections
// and closes them unanswered (a proxy or load balancer in front of a dead
// Redis, maxclients reached) is refusing too. With Config.Breaker.Disable
// nothing trips, but the batches in flight still fail at once on such
// evidence.
//
// A tripped node has one recovery probe, a goroutine that asks it, after a
// pause spread at random so that a fleet's instances do not come back
// together, whether it answers: a PING on a connection of its own (dialled
// with the client's dialer, without retries), then a PING through the
// client, which proves its credentials too. Only once both answer is
// Config.Recovered called, whose ops (Op.Recovery: the Cache's queued
// invalidations) go through, and only then does the breaker close for the
// other ops: what the process forgot while Redis was away reaches Redis
// before it reads from it again.

const (
	recoverFirst = 25 * time.Millisecond  // the first recovery probe, spread ±50%
	recoverMax   = 100 * time.Millisecond // the longest pause between probes, spread ±50%
	recoverAuth  = time.Second            // the pause after a refused AUTH
	recoverBound = 500 * time.Millisecond // a probe's PING is answered within this, capped at RedisTimeout
	quickLook    = 20 * time.Millisecond  // a batch unanswered this long has its node's probe connection looked at
)

// trip trips node's breaker for cause, fails the node's batches in flight
// with it, and starts the node's recovery probe unless one runs.
func (p *Pipeline) trip(node nodeRef, l *liveness, cause error) {
	tripped := l.breaker.trip(cause)
	if t := l.breaker.trip0(); t != nil {
		cause = t.err()
	}
	var old *nodeCtx
	if tripped {
		old = l.nctx.Swap(nil) // batches from now on (the recovery's) get a context of their own
		p.trips.Add(1)         // before an op is answered: its caller may ask Tripped next
	}
	p.failInflight(l, cause)
	if !tripped {
		return
	}
	if old != nil {
		old.cancel() // the calls the batches left in the client end, once their ops were answered
	}
	t := l.breaker.trip0()
	p.mu.Lock()
	if !p.closed { // close waits for the probes only once closed is set
		p.probers.Add(1)
		go p.recoverNode(node, l, t)
	}
	p.mu.Unlock()
}

// failInflight gives up every batch in flight to the node of l.
func (p *Pipeline) failInflight(l *liveness, err error) {
	var failed []*batch
	p.flyMu.Lock()
	for b := range p.inflight {
		if b.live == l {
			delete(p.inflight, b)
			failed = append(failed, b)
		}
	}
	p.flyMu.Unlock()
	for _, b := range failed {
		p.giveUp(b, tripErr{err})
	}
}

// admit answers the ops of g that the node's trip keeps from Redis with its
// error, and returns the others: all of them when the node is not tripped,
// the recovery's own once its probe answered, none before.
func (p *Pipeline) admit(g group, live *liveness) []*Op {
	t := live.breaker.trip0()
	if t == nil {
		return g.ops
	}
	keep := g.ops[:0]
	err := t.err()
	for _, o := range g.ops {
		if o.Recovery && t.recovering.Load() {
			keep = append(keep, o)
			continue
		}
		o.finish(Result{Err: err})
	}
	if len(keep) < len(g.ops) {
		p.failed(err) // on a Cluster: its slots may have a new master by now
	}
	return keep
}

// Recovering lets the ops marked Op.Recovery through every tripped
// breaker, as if each node had answered its probe: for a last replay
// before Close.
func (p *Pipeline) Recovering() {
	p.nodes.Range(func(_, l any) bool {
		if t := l.(*liveness).breaker.trip0(); t != nil {
			t.recovering.Store(true)
		}
		return true
	})
}

// trip0 returns b's trip, or nil when it is not tripped (or b is nil).
func (b *breaker) trip0() *trip {
	if b == nil {
		return nil
	}
	return b.tripped.Load()
}

// recoverNode is a tripped node's recovery probe (see the top of this file).
// It ends when the node answers, or when the pipeline closes.
func (p *Pipeline) recoverNode(node nodeRef, l *liveness, t *trip) {
	defer p.probers.Done()
	pause := recoverFirst
	for {
		timer := time.NewTimer(spread(pause, 0.5, p.cfg.Rand))
		select {
		case <-timer.C:
		case <-p.stop:
			timer.Stop()
			return
		}
		err := p.answers(node, l)
		if err == nil {
			if err = p.recoveryOps(node, t); err == nil {
				l.breaker.untrip(t)
				p.trips.Add(-1)
				return
			}
			pause = recoverFirst / 2 // doubled below: the node answers; try again soon
		}
		t.latest.Store(&failedCall{err})
		t.errv.Store(nil) // the calls' error names the latest cause
		pause = min(2*pause, recoverMax)
		if Says(err, AuthRefused) {
			pause = recoverAuth // a password is not fixed in milliseconds
		}
	}
}

// recoveryOps runs the caller's recovery ops (Config.Recovered: the queued
// invalidations) of a node that answers again, before its breaker closes.
// It returns their error when it says they did not get through (Redis
// unavailable, or their own deadline passed: a process starved of CPU):
// the breaker then stays open, and the recovery tries again.
func (p *Pipeline) recoveryOps(node nodeRef, t *trip) error {
	if p.cfg.Recovered == nil {
		return nil
	}
	t.recovering.Store(true)
	err := p.cfg.Recovered(node.addr)
	if err == nil || !Says(err, Unavailable|CallerGone) {
		return nil
	}
	t.recovering.Store(false)
	return err
}

// answers asks node whether it can be used again: a PING on a connection
// of its own (not for nodes probed through the client), then a PING
// through the client. It returns why not, or nil.
func (p *Pipeline) answers(node nodeRef, l *liveness) error {
	if c, ok := node.client.(*redis.Client); ok && !l.plain.Load() {
		if err := p.pingOwn(c, min(p.timeout, recoverBound)); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	err := node.client.Ping(ctx).Err()
	if c := Classify(err); err != nil && (c&Reply == 0 || c&Unavailable != 0) {
		return err // no answer, or one that says no (a refused AUTH, LOADING, ...)
	}
	now := time.Now().UnixNano()
	l.heard.Store(now)
	l.unheard.Store(0)
	return nil
}

// pingOwn dials c's server with c's own dialer, once, writes a PING and
// looks for any answer (one that wants AUTH answers with an error: it is
// there) for up to bound, reading the socket directly, so that a process
// starved of CPU does not miss an answer that came.
func (p *Pipeline) pingOwn(c *redis.Client, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(p.ctx, bound)
	defer cancel()
	o := c.Options()
	conn, err := o.Dialer(ctx, o.Network, o.Addr)
	if err != nil {
		if ctx.Err() != nil {
			return errorf("%w (no connection within %v)", ErrRedisTimeout, bound)
		}
		return unreachableError{err}
	}
	defer conn.Close()
	if _, err := conn.Write(Ping); err != nil {
		return unreachableError{err}
	}
	var buf [64]byte
	for tick := time.NewTicker(5 * time.Millisecond); ; {
		n, err := readNow(conn, buf[:])
		switch {
		case n > 0:
			tick.Stop()
			return nil
		case err != nil:
			tick.Stop()
			return unreachableError{err}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			tick.Stop()
			return errorf("%w (no answer to a PING within %v)", ErrRedisTimeout, bound)
		}
	}
}

// lookSoon looks at the node's probe connection without waiting (probe
// look): a server that went away closed it (EOF, a reset), and then a new
// one is dialled at once, whose refusal trips the node; one it closed
// before it answered a PING trips it at once. So a killed or restarted
// Redis is known within a monitor tick of the first call it leaves
// unanswered, not after the client's retries.
func (p *Pipeline) lookSoon(node nodeRef, l *liveness) {
	c, ok := node.client.(*redis.Client)
	if !ok {
		return
	}
	if l.plain.Load() {
		p.dialCheck(node, l, c)
		return
	}
	pr := &l.prober
	pr.mu.Lock()
	if pr.conn == nil {
		pr.mu.Unlock()
		p.dialProbe(node, l, c, false) // unless being dialled: a refusal trips the node
		return
	}
	err := pr.look(l, false)
	ended := err != nil
	p.probeEnded(node, l, err) // unlocks pr.mu
	if ended {
		p.dialProbe(node, l, c, true)
	}
}

// dialCheck is lookSoon for a node whose connections are not plain sockets
// (TLS, a dialer that wraps them), which the monitor cannot read directly:
// a dial of its own with the client's dialer, without retries, unless one
// is under way. A refusal trips the node; a connection made is closed.
func (p *Pipeline) dialCheck(node nodeRef, l *liveness, c *redis.Client) {
	if !l.dialing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.dialing.Store(false)
		ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
		defer cancel()
		o := c.Options()
		conn, err := o.Dialer(ctx, o.Network, o.Addr)
		switch {
		case err == nil:
			conn.Close()
		case ctx.Err() == nil && !Says(err, Timeout):
			l.refused.Store(&refusal{err: err, at: time.Now()})
			p.note(err)
			p.trip(node, l, unreachableError{err})
		}
	}()
}
