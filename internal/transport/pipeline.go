package transport

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Pipeline: ops queue, and senders take them in batches (see the
// package doc). How a batch is sent is in exchange.go.

const (
	maxBatches  = 8       // batches in flight at once, per Pipeline: the senders
	maxBatchOps = 512     // commands in one batch
	maxBatchLen = 1 << 20 // bytes of payload in one batch; a larger op goes alone

	senderLinger = time.Millisecond
	resendPause  = 10 * time.Millisecond // before an op that could not connect goes again
)

// Config is what a Pipeline is made with.
type Config struct {
	// Timeout bounds a batch from when it is sent (RedisTimeout), plus its
	// payload's transfer time; a node alive but slow gets more (liveness.go).
	Timeout time.Duration
	// Rand returns numbers uniform in [0, 1): it spreads the breakers'
	// cool-downs and the recovery probes' pauses.
	Rand func() float64
	// Failed is told of every failure that says Redis is unavailable, and
	// of every moved slot: on a Cluster, the slot map may be stale. May be
	// nil.
	Failed func(err error)
	// Recovered is called by a tripped node's recovery once the node
	// answers, before its breaker lets the callers' ops through: the ops it
	// sends marked Op.Recovery go first. node is its address ("" off a
	// Cluster). When it returns an error that says its ops did not get
	// through (Unavailable, or CallerGone: their deadline passed, as in a
	// process starved of CPU past it), the breaker
	// stays open and the recovery probes again, so that what had to go
	// first still does; any other error (a refusal the ops will keep
	// meeting) lets the breaker close. May be nil.
	Recovered func(node string) error
	Breaker   BreakerConfig
	Logger    *slog.Logger // the breakers' warnings
	Stats     Stats        // may be nil
}

// Stats is told of the breakers' changes of state.
type Stats interface {
	// BreakerChanged: node's breaker opened (either way, once per
	// opening), went half-open, or closed.
	BreakerChanged(node string, to BreakerState)
}

// Pipeline queues ops and sends them in batches.
type Pipeline struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil off a Cluster
	timeout time.Duration        // Config.Timeout
	probeAt time.Duration        // a batch unanswered this long has its node probed: ProbeAfter, at most timeout/2
	failed  func(err error)      // Config.Failed, never nil
	cfg     Config
	probers sync.WaitGroup // recovery probes running (down.go)
	trips   atomic.Int32   // nodes tripped now (down.go)

	mu      sync.Mutex // guards queue, senders, idle and closed
	queue   []*Op
	senders int           // sender goroutines running, not counting those given up on
	batches atomic.Int64  // batches sent, ever
	idle    int           // senders lingering for work, not yet woken
	work    chan struct{} // wakes a lingering sender
	closed  bool
	stop    chan struct{} // closed by Close
	// ctx is the context of the client's calls, cancelled by Close. The
	// monitor, not a deadline, bounds them (liveness.go): a deadline would
	// cost a timer per batch, and bounds reads only for clients with
	// ContextTimeoutEnabled.
	ctx    context.Context
	cancel context.CancelFunc

	health  // liveness.go
	inliner // inline.go
}

// New returns a Pipeline sending on rdb, and starts its monitor; Close
// stops it.
func New(rdb redis.UniversalClient, cfg Config) *Pipeline {
	p := &Pipeline{
		rdb: rdb, timeout: cfg.Timeout, probeAt: min(ProbeAfter, cfg.Timeout/2), failed: cfg.Failed, cfg: cfg,
		stop: make(chan struct{}), work: make(chan struct{}, maxBatches),
	}
	if p.failed == nil {
		p.failed = func(error) {}
	}
	if p.cfg.Logger == nil {
		p.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.cluster, _ = rdb.(*redis.ClusterClient)
	p.health.init()
	if p.inliner.init(rdb, cfg.Timeout); !p.inliner.enabled {
		p.cfg.Logger.Warn(SlowClient)
	}
	go p.monitor()
	return p
}

// Do sends o and waits for its result, or for its context to end.
func (p *Pipeline) Do(o *Op) Result {
	done := make(chan Result, 1)
	o.Finish = func(r Result) {
		if o.Arrived != nil && r.Err == nil && r.Cmd.Err() == nil {
			o.Arrived(r.Cmd)
		}
		done <- r
	}
	if !p.enqueue(o) {
		return Result{Err: ErrClosed}
	}
	select {
	case r := <-done:
		return r
	case <-o.Ctx.Done():
		return Result{Err: callerGone{o.Ctx.Err()}}
	}
}

// Send sends the read o inline when it may (inline.go), answering it in the
// calling goroutine, otherwise through the pipeline; o.Finish gets its
// result (ErrClosed once the Pipeline is closed).
func (p *Pipeline) Send(o *Op) {
	if p.inline(o) {
		return
	}
	if !p.enqueue(o) {
		o.finish(Result{Err: ErrClosed})
	}
}

// SendAll queues ops together, so that a sender takes them in one batch
// (up to maxBatchOps and maxBatchLen): one round trip per node. Each op's
// Finish gets its result.
func (p *Pipeline) SendAll(ops []*Op) {
	if !p.enqueueAll(ops) {
		for _, o := range ops {
			o.finish(Result{Err: ErrClosed})
		}
	}
}

// DoEach sends an op made by op (one per node) to every master of a Cluster, or to the one
// node of another client, and waits for their results, by node address (""
// off a Cluster). err is the first error of any (the Cluster's slot map
// that could not be read, say).
func (p *Pipeline) DoEach(ctx context.Context, op func() *Op) (map[string]Result, error) {
	if p.cluster == nil {
		o := op()
		r := p.Do(o)
		return map[string]Result{"": r}, resultErr(r)
	}
	var mu sync.Mutex
	results := map[string]Result{}
	err := p.cluster.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		o := op()
		o.node = &nodeRef{addr: m.Options().Addr, client: m}
		r := p.Do(o)
		mu.Lock()
		defer mu.Unlock()
		results[o.node.addr] = r
		return resultErr(r)
	})
	return results, err
}

// resultErr is r's error, or its command's.
func resultErr(r Result) error {
	if r.Err != nil {
		return r.Err
	}
	return r.Cmd.Err()
}

// enqueue queues o, starting a sender when fewer than maxBatches run, or
// reports false when the pipeline is closed.
func (p *Pipeline) enqueue(o *Op) bool {
	return p.enqueueAll([]*Op{o})
}

// enqueueAll queues ops together, as enqueue does one op.
func (p *Pipeline) enqueueAll(ops []*Op) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	urgent := ops[0].Urgent
	if urgent {
		p.queue = append(ops[:len(ops):len(ops)], p.queue...)
	} else {
		p.queue = append(p.queue, ops...)
	}
	wake, start := p.idle > 0, false
	switch {
	case wake:
		p.idle--
	case p.senders < maxBatches || urgent && p.senders < maxBatches+1:
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
// the package doc), until it has lingered in vain, or a batch it sent was
// given up on while the client still waits for it (liveness.go then counts
// it out, so another sender can start).
func (p *Pipeline) sender() {
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
func (p *Pipeline) released() {
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
func (p *Pipeline) take() []*Op {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.idle++
		return nil
	}
	n, size := 0, 0
	for n < len(p.queue) && n < maxBatchOps {
		if size += p.queue[n].Size; n > 0 && size > maxBatchLen {
			break
		}
		n++
	}
	batch := make([]*Op, n)
	copy(batch, p.queue)
	p.queue = append(p.queue[:0], p.queue[n:]...)
	return batch
}

// Close stops the senders and fails queued ops with ErrClosed. It does not
// wait for batches in flight: a client that keeps waiting on a silent Redis
// (a long ReadTimeout) would hold Close up; their goroutines end when the
// client gives up or Redis answers. It returns the group of the recovery
// probes still ending, for the caller to wait on as long as its own
// deadline allows: a probe ends at once, unless it is inside a client's
// read that ignores the context (a client without ContextTimeoutEnabled),
// which ends at the client's ReadTimeout.
func (p *Pipeline) Close() *sync.WaitGroup {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return &p.probers
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
		o.finish(Result{Err: ErrClosed})
	}
	return &p.probers
}

// BreakerFunc is a Stats that is a function.
type BreakerFunc func(node string, to BreakerState)

// BreakerChanged calls f.
func (f BreakerFunc) BreakerChanged(node string, to BreakerState) { f(node, to) }

// Cluster reports whether the client is a Cluster's.
func (p *Pipeline) Cluster() bool { return p.cluster != nil }
