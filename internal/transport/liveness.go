package transport

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Slow is not down. A batch in flight is watched by the pipeline's monitor.
// A batch unanswered after a short while (ProbeAfter), when its node has
// said nothing in the current window, has the node probed (probe.go): a
// PING on a connection of the monitor's own, whose answer the monitor reads
// straight off the socket, so that a client starved of CPU is not taken for
// a silent Redis. A connection the node refuses fails the batch at once:
// Redis is unreachable. At the bound (RedisTimeout, plus the time the
// batch's payload needs on the wire), a node that answered anything in the
// last RedisTimeout is alive (a big transfer, a busy server, a client
// starved of CPU), and the batch waits another RedisTimeout, up to
// maxStalls bounds in all. Only a node whose probe has gone unanswered for
// a whole RedisTimeout, with nothing else heard from it meanwhile, is
// silent: that fails the batch. A failed batch's ops are answered at once;
// the sender still waiting on the client for it retires, and another may
// start in its place. A batch the client could not send because its new
// connection did not open in time is sent again (retry.go): that too is
// what a client starved of CPU sees.

const (
	maxStalls = 10 // a batch whose node stays alive waits at most this many bounds (not counting starved time: cpuwait.go)
	// ProbeAfter: a batch unanswered this long (at most the timeout/2),
	// its node silent as long, has the node probed.
	ProbeAfter = 100 * time.Millisecond
	// MonitorTick is the monitor's tick while batches fly (at most the
	// timeout/4): a verdict comes at most this late.
	MonitorTick = 25 * time.Millisecond
)

// transferRate is the slowest rate, in bytes per second, at which corral
// expects a value to cross the wire: a batch carrying n bytes is allowed
// n/transferRate on top of RedisTimeout.
const transferRate = 8 << 20

// health is what the pipeline knows of its nodes and its batches in flight.
type health struct {
	nodes sync.Map // node address ("" off a Cluster) -> *liveness

	flyMu    sync.Mutex // guards inflight
	inflight map[*batch]struct{}
	busy     chan struct{} // a send: a batch went in flight

	lastMu sync.Mutex // guards last
	last   lastError

	cpu cpuMeter // the monitor's (cpuwait.go)
}

func (h *health) init() {
	h.inflight = make(map[*batch]struct{})
	h.busy = make(chan struct{}, 1)
}

// liveness is what the pipeline knows of one node's health.
type liveness struct {
	breaker *breaker                  // nil when disabled
	heard   atomic.Int64              // when the node last answered anything (Unix ns)
	refused atomic.Pointer[refusal]   // the latest connection the node refused
	unheard atomic.Int64              // when the first probe still unanswered was sent (Unix ns); 0 for none
	clock   atomic.Pointer[clockSync] // the node's clock as the latest batch read it (inline.go)

	prober              // the node's probe connection (probe.go)
	plain   atomic.Bool // the node is probed through the client (probe.go)
	probing atomic.Bool // a probe through the client is under way
	dialing atomic.Bool // a dial check is under way (down.go)

	nctx atomic.Pointer[nodeCtx] // the context of the client's calls to the node; nil until the first
}

// nodeCtx is the context of the client's calls to a node: cancelled when
// the node trips (down.go), so that calls left inside the client (waiting
// out its dial retries) end rather than pile up connection errors, and
// replaced for the calls after. One per node, not one per batch.
type nodeCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns the context of the client's calls to l's node, a child
// of parent (the pipeline's).
func (l *liveness) context(parent context.Context) context.Context {
	if c := l.nctx.Load(); c != nil {
		return c.ctx
	}
	c := &nodeCtx{}
	c.ctx, c.cancel = context.WithCancel(parent)
	if l.nctx.CompareAndSwap(nil, c) {
		return c.ctx
	}
	c.cancel()
	return l.nctx.Load().ctx
}

// refusal is a connection a node refused.
type refusal struct {
	err error
	at  time.Time
}

// lastError is the most recent error a command got from the client, so that
// a timeout can say what else was going wrong.
type lastError struct {
	err error
	at  time.Time
}

// batch is a group of ops in flight to one node.
type batch struct {
	ops     []*Op
	node    nodeRef
	live    *liveness
	done    func(error) // reports the outcome to the node's breaker
	sent    time.Time
	bound   time.Duration
	seen    time.Time     // when the monitor last looked at it (sent, at first)
	counted time.Duration // time in flight that counts toward the cap: not starved (cpuwait.go)
	sender  bool          // sent by a sender itself, which is stuck while it waits
	settled atomic.Bool

	// guarded by health.flyMu:
	deadline time.Time
}

// begin puts g in flight: through its node's breaker (an open breaker
// fails it at once with ErrCircuitOpen) and under the monitor's watch.
func (p *Pipeline) begin(g group, sender bool) (*batch, error) {
	live := p.liveness(g.node.addr)
	if c, ok := g.node.client.(*redis.Client); ok && !live.plain.Load() && !live.prober.started.Load() {
		p.dialProbe(g.node, live, c, false) // before it is needed
	}
	recovery := true
	for _, o := range g.ops {
		recovery = recovery && o.Recovery
	}
	done, err := live.breaker.allow(recovery)
	if err != nil {
		p.failed(err)
		return nil, err
	}
	size := 0
	for _, o := range g.ops {
		size += o.Size
	}
	b := &batch{ops: g.ops, node: g.node, live: live, done: done, sent: time.Now(), sender: sender,
		bound: p.timeout + time.Duration(float64(size)/transferRate*float64(time.Second))}
	b.seen = b.sent
	p.flyMu.Lock()
	// A trip fails the batches in flight under flyMu (failInflight): one
	// that came since allow is seen here, or this batch is seen there.
	if t := live.breaker.trip0(); t != nil && !(recovery && t.recovering.Load()) {
		p.flyMu.Unlock()
		done(errTripped)
		return nil, t.err()
	}
	b.deadline = b.sent.Add(b.bound)
	p.inflight[b] = struct{}{}
	p.flyMu.Unlock()
	select {
	case p.busy <- struct{}{}:
	default:
	}
	return b, nil
}

// settle ends b's flight with err, the client's outcome, unless the monitor
// gave b up first: it reports whether the caller is to answer b's ops.
func (b *batch) settle(err error) bool {
	if !b.settled.CompareAndSwap(false, true) {
		if err != nil {
			// Noted even though the ops were answered: a refused
			// connection that the client reports only after its own dial
			// retries still names the cause of later errors.
			b.live.noteLate(err)
		}
		return false
	}
	if err == nil {
		b.live.heard.Store(time.Now().UnixNano())
		b.live.unheard.Store(0)
	}
	b.live.breaker.failed(err)
	b.done(err)
	return true
}

// monitor watches the batches in flight (see the top of this file), ticking
// only while there are some.
func (p *Pipeline) monitor() {
	tick := min(MonitorTick, p.timeout/4)
	for {
		select {
		case <-p.busy:
		case <-p.stop:
			return
		}
		t := time.NewTicker(tick)
		for p.watch() {
			select {
			case <-t.C:
			case <-p.stop:
				t.Stop()
				return
			}
		}
		t.Stop()
	}
}

// watch checks every batch in flight once, and reports whether any is left.
func (p *Pipeline) watch() bool {
	now := time.Now()
	starved := p.cpu.starved()
	var failed []*batch
	var errs []error
	var down []bool
	p.flyMu.Lock()
	for b := range p.inflight {
		if b.settled.Load() {
			delete(p.inflight, b)
			continue
		}
		if err, trip := p.check(b, now, starved); err != nil {
			delete(p.inflight, b)
			failed, errs, down = append(failed, b), append(errs, err), append(down, trip)
		}
	}
	left := len(p.inflight) > 0
	p.flyMu.Unlock()
	for i, b := range failed {
		p.giveUp(b, errs[i])
		if down[i] {
			p.trip(b.node, b.live, errs[i]) // silent, or refusing connections: the node is down
		}
	}
	return left
}

// check applies the liveness rules to b at now; a non-nil error fails it,
// and trip says it is evidence that the node is down (a refusal, a
// silence), not merely a batch that never got its answer. starved says this
// process's goroutines waited long for the CPU since the last check: that
// time does not count toward the cap. Nor does a gap between two checks
// longer than two ticks: the monitor itself waited for a CPU, which the
// Go runtime's own measure does not see when the operating system is the
// one that held its thread back (a machine busy with other processes).
// Called with flyMu held.
func (p *Pipeline) check(b *batch, now time.Time, starved bool) (err error, trip bool) {
	if !starved {
		b.counted += min(now.Sub(b.seen), 2*min(MonitorTick, p.timeout/4))
	}
	b.seen = now
	if r := b.live.refused.Load(); r != nil && r.at.After(b.sent) {
		return unreachableError{r.err}, true
	}
	heardAt := time.Unix(0, b.live.heard.Load())
	switch age := now.Sub(b.sent); {
	case age >= p.probeAt && now.Sub(heardAt) >= p.probeAt:
		p.probe(b.node, b.live) // nothing heard from the node for a while: is it there?
	case age >= quickLook && heardAt.Before(b.sent):
		p.lookSoon(b.node, b.live) // a server gone away closed the probe's connection
	}
	// A PING out, and nothing heard since: its silence for a bound less the
	// probe's delay is a bound of silence from the node, counted from
	// before the batch was sent or from the node's last word, whichever is
	// later.
	unheard := b.live.unheard.Load()
	pingOut := unheard != 0 && b.live.heard.Load() < unheard
	silent := pingOut && now.Sub(time.Unix(0, unheard)) >= p.timeout-p.probeAt
	switch {
	case now.After(b.deadline) && silent:
		return p.timeoutError(now.Sub(b.sent).Round(time.Millisecond)), true
	case b.counted >= maxStalls*b.bound || now.Sub(b.sent) >= 3*maxStalls*b.bound:
		return p.timeoutError(now.Sub(b.sent).Round(time.Millisecond)), false
	case now.After(b.deadline) && !pingOut:
		// Alive, only slow: the node answered lately, its probe included.
		// The patience is deliberate: a client or server starved of CPU (a
		// busy machine) answers late, and a wrong verdict costs a load per
		// process. (With a PING out, each tick asks again.)
		b.deadline = now.Add(p.timeout)
	}
	return nil, false
}

// silent reports whether l's probe has gone unanswered for timeout, with
// nothing heard from the node since it went out.
func (l *liveness) silent(timeout time.Duration) bool {
	u := l.unheard.Load()
	return u != 0 && time.Since(time.Unix(0, u)) >= timeout && l.heard.Load() < u
}

// giveUp fails b's ops with err, unless the client answered first, and
// counts out the sender still waiting on the client.
func (p *Pipeline) giveUp(b *batch, err error) {
	if !b.settled.CompareAndSwap(false, true) {
		return
	}
	b.live.breaker.failed(err)
	b.done(err)
	if Says(err, Unavailable) {
		p.failed(err)
	}
	for _, o := range b.ops {
		o.finish(Result{Err: err})
	}
	if b.sender {
		p.released()
	}
}

// liveness returns what is known of node's health.
func (p *Pipeline) liveness(addr string) *liveness {
	if l, ok := p.nodes.Load(addr); ok {
		return l.(*liveness)
	}
	l, _ := p.nodes.LoadOrStore(addr, &liveness{breaker: p.breakerFor(addr)})
	return l.(*liveness)
}
