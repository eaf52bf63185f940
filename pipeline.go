package corral

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pipeline sends corral's commands to Redis. Concurrent calls share
// round trips: calls queue, and up to maxBatches senders each take what has
// queued and send it as one pipelined batch (auto-pipelining, as rueidis
// does; on a Cluster, one batch per master). A sender is a goroutine started
// by a call that finds no sender free, up to maxBatches; one that finds the
// queue empty lingers for senderLinger, for the next call to wake it rather
// than start a new goroutine (whose stack would have to grow again to the
// client's depth), then ends: an idle Cache has no sender. So a process asking for a
// thousand cold keys at once costs a few round trips, not a thousand waits
// for a pooled connection, and the time a call spends queued is not
// mistaken for a slow Redis: a batch's bound (RedisTimeout, plus the time
// its payload needs on the wire) starts when it is sent. The health of each
// node, and what happens to a batch that gets no answer, is in liveness.go.

const (
	maxBatches  = 8       // batches in flight at once, per Cache: the senders
	maxBatchOps = 512     // commands in one batch
	maxBatchLen = 1 << 20 // bytes of payload in one batch; a larger op goes alone

	senderLinger = time.Millisecond
	resendPause  = 10 * time.Millisecond // before an op that could not connect goes again
)

// op is one command in the pipeline.
type op struct {
	ctx   context.Context // when it ends before the op is sent, the op is dropped
	build func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	// rebuild sends a script with its source, after the server answered
	// NOSCRIPT (nil for plain commands).
	rebuild  func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	key      string         // a key the command touches: on a Cluster, where it is sent
	size     int            // bytes the command or its reply carries, when known
	clock    bool           // the op needs the server's clock: its batch reads TIME first
	read     []any          // a read-only command's arguments, which may be sent alone (inline.go)
	readOnly bool           // the command only reads: sent again when a live node's reply came too late (retry.go)
	readBy   time.Time      // when an inline read of it ends at the latest: its caller's deadline (zero for none)
	noscript bool           // the server lacked the script: send its source
	retryBy  time.Time      // a "not now" reply's retries end (retryLater)
	resendBy time.Time      // a send that could not connect is tried again until (sendAgain)
	recovery bool           // sent by a tripped node's recovery, before the callers' ops (down.go)
	finish   func(opResult) // called once, by the pipeline
}

// opResult is what became of an op: its command, the server's clock (ms,
// for clock ops) when the batch ran, or an error that kept it from running.
type opResult struct {
	cmd redis.Cmder
	now int64
	err error
}

// pipeline queues ops and sends them in batches.
type pipeline struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil off a Cluster
	timeout time.Duration        // RedisTimeout
	probeAt time.Duration        // a batch unanswered this long has its node probed: probeAfter, at most RedisTimeout/2
	failed  func(err error)      // told of every failure that says Redis is unavailable
	// newBreaker makes the circuit breaker of a node (nil when disabled).
	newBreaker func(node string) *breaker
	// recovered is called by a tripped node's recovery once the node
	// answers, before its breaker closes (down.go); nil for nothing.
	recovered func(node string)
	rand      func() float64 // Options.Rand
	probers   sync.WaitGroup // recovery probes running (down.go)
	trips     atomic.Int32   // nodes tripped now (down.go)

	mu      sync.Mutex // guards queue, senders, idle and closed
	queue   []*op
	senders int           // sender goroutines running, not counting those given up on
	batches atomic.Int64  // batches sent by senders, ever
	idle    int           // senders lingering for work, not yet woken
	work    chan struct{} // wakes a lingering sender
	closed  bool
	stop    chan struct{} // closed by close
	// ctx is the context of the client's calls, cancelled by close. The
	// monitor, not a deadline, bounds them (liveness.go): a deadline would
	// cost a timer per batch, and bounds reads only for clients with
	// ContextTimeoutEnabled.
	ctx    context.Context
	cancel context.CancelFunc

	health  // liveness.go
	inliner // inline.go
}

// pipeConfig is what a pipeline is made with.
type pipeConfig struct {
	timeout    time.Duration                    // RedisTimeout
	rand       func() float64                   // Options.Rand
	failed     func(err error)                  // told of every failure that says Redis is unavailable
	newBreaker func(*pipeline, string) *breaker // a node's circuit breaker (nil when disabled)
	recovered  func(node string)                // see pipeline.recovered
}

func newPipeline(rdb redis.UniversalClient, cfg pipeConfig) *pipeline {
	p := &pipeline{
		rdb: rdb, timeout: cfg.timeout, probeAt: min(probeAfter, cfg.timeout/2), failed: cfg.failed,
		recovered: cfg.recovered, rand: cfg.rand, stop: make(chan struct{}),
		work: make(chan struct{}, maxBatches),
	}
	timeout := cfg.timeout
	p.newBreaker = func(node string) *breaker { return cfg.newBreaker(p, node) }
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.cluster, _ = rdb.(*redis.ClusterClient)
	p.health.init()
	p.inliner.init(rdb, timeout)
	go p.monitor()
	return p
}

// do sends an op and waits for its result, or for its context to end.
func (p *pipeline) do(o *op) opResult {
	done := make(chan opResult, 1)
	o.finish = func(r opResult) { done <- r }
	if !p.enqueue(o) {
		return opResult{err: ErrClosed}
	}
	select {
	case r := <-done:
		return r
	case <-o.ctx.Done():
		return opResult{err: callerGone{o.ctx.Err()}}
	}
}

// enqueue queues o, starting a sender when fewer than maxBatches run, or
// reports false when the pipeline is closed.
func (p *pipeline) enqueue(o *op) bool {
	return p.enqueueAll([]*op{o})
}

// enqueueAll queues ops together, so that a sender takes them in one batch
// (up to maxBatchOps and maxBatchLen), as enqueue does one op.
func (p *pipeline) enqueueAll(ops []*op) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, ops...)
	wake, start := p.idle > 0, false
	switch {
	case wake:
		p.idle--
	case p.senders < maxBatches:
		p.senders++
		start = true
	}
	p.mu.Unlock()
	switch {
	case wake:
		p.work <- struct{}{} // buffered: never blocks
	case start:
		go p.sender()
	}
	return true
}

// sender sends batches while there are some, lingering between them (see
// the top of this file), until it has lingered in vain, or a batch it sent
// was given up on while the client still waits for it (liveness.go then
// counts it out, so another sender can start).
func (p *pipeline) sender() {
	linger := time.NewTimer(senderLinger)
	defer linger.Stop()
	for {
		if batch := p.take(); batch != nil {
			if !p.send(batch) {
				return
			}
			continue
		}
		linger.Reset(senderLinger)
		select {
		case <-p.work:
			continue
		case <-p.stop:
		case <-linger.C:
		}
		p.mu.Lock()
		if p.idle == 0 {
			// Every lingering sender was woken: a wake-up is ours.
			p.mu.Unlock()
			select {
			case <-p.work:
				continue
			case <-p.stop:
				return
			}
		}
		p.idle--
		p.senders--
		p.mu.Unlock()
		return
	}
}

// released counts out a sender stuck on a batch given up on, and starts
// another if ops wait.
func (p *pipeline) released() {
	p.mu.Lock()
	p.senders--
	start := len(p.queue) > 0 && p.senders < maxBatches && !p.closed
	if start {
		p.senders++
	}
	p.mu.Unlock()
	if start {
		go p.sender()
	}
}

// take removes the next batch from the queue: ops in order, up to
// maxBatchOps and maxBatchLen bytes (at least one op). With the queue
// empty, it returns nil and counts the calling sender as lingering.
func (p *pipeline) take() []*op {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.idle++
		return nil
	}
	n, size := 0, 0
	for n < len(p.queue) && n < maxBatchOps {
		if size += p.queue[n].size; n > 0 && size > maxBatchLen {
			break
		}
		n++
	}
	batch := make([]*op, n)
	copy(batch, p.queue)
	p.queue = append(p.queue[:0], p.queue[n:]...)
	return batch
}

// send sends one batch, split by Cluster master so a node that stalls holds
// up only its own ops, and answers each op. It reports false when it was
// given up on while the client waited (the worker then retires).
func (p *pipeline) send(batch []*op) bool {
	live := batch[:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.finish(opResult{err: callerGone{err}}) // the caller left: not sent
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return true
	}
	if p.cluster == nil {
		return p.exchange(group{ops: live, node: nodeRef{client: p.rdb}}, true)
	}
	// The other masters' groups go in goroutines of their own, so a master
	// that stalls holds up only its own ops.
	groups := p.byNode(live)
	for _, g := range groups[min(1, len(groups)):] {
		go p.exchange(g, false)
	}
	return len(groups) == 0 || p.exchange(groups[0], true)
}

// group is the ops of a batch that go to one node.
type group struct {
	ops  []*op
	node nodeRef
}

// nodeRef names a node and the client that reaches it.
type nodeRef struct {
	addr   string // "" off a Cluster
	client redis.UniversalClient
}

// byNode splits ops by the Cluster master that serves their keys (one
// group off a Cluster). On a Cluster a batch is sent on the master's own
// client, so that its TIME is that master's clock; a command whose slot has
// moved meanwhile gets MOVED or ASK and is sent again.
func (p *pipeline) byNode(ops []*op) []group {
	if len(ops) == 0 {
		return nil
	}
	if p.cluster == nil {
		return []group{{ops: ops, node: nodeRef{client: p.rdb}}}
	}
	index := map[string]int{}
	var groups []group
	for _, o := range ops {
		ref := nodeRef{client: p.rdb}
		if m, err := p.cluster.MasterForKey(context.Background(), o.key); err == nil {
			ref = nodeRef{addr: m.Options().Addr, client: m}
		}
		i, ok := index[ref.addr]
		if !ok {
			i = len(groups)
			index[ref.addr] = i
			groups = append(groups, group{node: ref})
		}
		groups[i].ops = append(groups[i].ops, o)
	}
	return groups
}

// exchange sends g's ops as one pipeline, through the node's circuit
// breaker and under its liveness watch, and answers them: ops whose script
// the server lacked (NOSCRIPT) are queued again to go with their source,
// and ops that got a "not now" reply (LOADING, BUSY, TRYAGAIN, MOVED, ...)
// are queued again while their RedisTimeout lasts. It reports false when
// the watch gave up on the batch while the client still waited. sender says
// the calling goroutine is a sender (counted out if given up on).
func (p *pipeline) exchange(g group, sender bool) bool {
	if g.ops = p.admit(g, p.liveness(g.node.addr)); len(g.ops) == 0 {
		return true
	}
	p.batches.Add(1)
	b, err := p.begin(g, sender)
	if err != nil {
		for _, o := range g.ops {
			o.finish(opResult{err: err})
		}
		return true
	}
	cmds, now, err := p.exec(g, b.live.context(p.ctx))
	if !b.settle(err) {
		return false // the watch answered the ops already
	}
	if err != nil {
		p.batchFailed(b, g, err)
		return true
	}
	for i, o := range g.ops {
		cerr := cmds[i].Err()
		switch {
		case cerr != nil && o.rebuild != nil && !o.noscript && strings.HasPrefix(cerr.Error(), "NOSCRIPT"):
			o.noscript = true
			if !p.enqueue(o) {
				o.finish(opResult{err: ErrClosed})
			}
			continue
		case notNow(cerr) && p.retryLater(o):
			if p.cluster != nil && (strings.HasPrefix(cerr.Error(), "MOVED") || strings.HasPrefix(cerr.Error(), "ASK")) {
				p.failed(cerr) // the slot moved: reload the slot map
			}
			continue
		case cerr != nil && !errors.Is(cerr, redis.Nil):
			p.note(cerr)
		}
		o.finish(opResult{cmd: cmds[i], now: now})
	}
	return true
}

// exec runs g's ops as one pipeline on the node's client, with the
// server's clock first when an op needs it.
func (p *pipeline) exec(g group, ctx context.Context) (cmds []redis.Cmder, now int64, err error) {
	pipe := g.node.client.Pipeline()
	var clock *redis.TimeCmd
	for _, o := range g.ops {
		if o.clock {
			clock = pipe.Time(ctx)
			break
		}
	}
	cmds = make([]redis.Cmder, len(g.ops))
	for i, o := range g.ops {
		if o.noscript {
			cmds[i] = o.rebuild(ctx, pipe)
		} else {
			cmds[i] = o.build(ctx, pipe)
		}
	}
	sent := time.Now()
	if _, err := pipe.Exec(ctx); err != nil && !(isReplyError(err) && answered(cmds, clock)) {
		return nil, 0, err
	}
	if clock != nil {
		t, err := clock.Result()
		if err != nil {
			return nil, 0, err
		}
		now = t.UnixMilli()
		p.liveness(g.node.addr).synced(t, sent)
	}
	return cmds, now, nil
}

// answered reports whether the error reply that failed a pipeline's Exec
// came from one of its commands, which then carries it. An error reply to
// the connection's set-up (AUTH with a wrong password, say) fails Exec
// with no command run: that is the exchange's failure, and its reply is
// the error to report.
func answered(cmds []redis.Cmder, clock *redis.TimeCmd) bool {
	if clock != nil && clock.Err() != nil {
		return true
	}
	for _, c := range cmds {
		if c.Err() != nil {
			return true
		}
	}
	return false
}

// close stops the senders and fails queued ops with ErrClosed. It does not
// wait for batches in flight: a client that keeps waiting on a silent Redis
// (a long ReadTimeout) would hold Close up; their goroutines end when the
// client gives up or Redis answers.
func (p *pipeline) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	queued := p.queue
	p.queue = nil
	p.mu.Unlock()
	close(p.stop)
	p.cancel()
	p.nodes.Range(func(_, l any) bool {
		l.(*liveness).prober.close()
		l.(*liveness).breaker.freeze()
		return true
	})
	for _, o := range queued {
		o.finish(opResult{err: ErrClosed})
	}
	// A recovery probe ends at once with p.ctx, unless it is inside a
	// client's read that ignores the context (a client without
	// ContextTimeoutEnabled): that one ends at the client's ReadTimeout.
	waitUntil(&p.probers, time.Now().Add(50*time.Millisecond))
}
