package corral

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pipeline sends corral's commands to Redis. Concurrent calls share
// round trips: calls queue, and a dispatcher sends what has queued as one
// pipelined batch, with at most maxBatches batches in flight at once
// (auto-pipelining, as rueidis does). So a process asking for a thousand
// cold keys at once costs a few round trips, not a thousand waits for a
// pooled connection, and the time a call spends queued is not mistaken for
// a slow Redis: a call's bound (RedisTimeout, plus the time its payload needs
// on the wire) starts when its batch is handed to the client.
//
// Slow is not down. A batch unanswered after a short while (probeAfter),
// when its node has said nothing in the current window, has the node probed:
// a new connection with the client's own dialer (so a refused connection is
// known at once, not after the client's own dial retries), then a PING. A
// refused connection fails the batch at once: Redis is unreachable. At the
// bound, a node that answered anything in the last RedisTimeout is alive (a
// big transfer, a busy server, a client starved of CPU), and the batch waits
// another RedisTimeout, up to maxStalls bounds in all. Only a node silent
// for a whole RedisTimeout fails the batch.

const (
	maxBatches  = 8       // batches in flight at once, per Cache
	maxBatchOps = 512     // commands in one batch
	maxBatchLen = 1 << 20 // bytes of payload in one batch; a larger op goes alone
	maxStalls   = 10      // a batch whose node stays alive waits at most this many bounds
	probeAfter  = 100 * time.Millisecond
)

// transferRate is the slowest rate, in bytes per second, at which corral
// expects a value to cross the wire: an op carrying n bytes is allowed
// n/transferRate on top of RedisTimeout.
const transferRate = 8 << 20

// op is one command in the pipeline.
type op struct {
	ctx   context.Context // the caller's: when it ends before the op is sent, the op is dropped
	build func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	// rebuild sends a script with its source after NOSCRIPT (nil for plain
	// commands).
	rebuild func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	key     string // a key the command touches: on a Cluster, where it is sent
	size    int    // bytes the command or its reply carries, when known
	retryBy time.Time
	done    chan opResult // buffered
}

type opResult struct {
	cmd redis.Cmder
	err error
}

// pipeline queues ops and sends them in batches.
type pipeline struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil off a Cluster
	timeout time.Duration        // RedisTimeout
	failed  func(err error)      // told of every failure that says Redis is unavailable
	// newBreaker makes the circuit breaker of a node (nil when disabled).
	newBreaker func(node string) *breaker

	mu     sync.Mutex // guards queue and closed
	queue  []*op
	closed bool
	wake   chan struct{} // a send: the queue is not empty
	slots  chan struct{} // a send takes a slot for one batch in flight
	stop   chan struct{} // closed by close
	wg     sync.WaitGroup
	lastMu sync.Mutex // guards last
	last   lastError
	nodes  sync.Map // node address ("" off a Cluster) -> *liveness
}

// liveness is what a pipeline knows of one node's health.
type liveness struct {
	breaker *breaker                // nil when disabled
	heard   atomic.Int64            // when the node last answered anything (Unix ns)
	refused atomic.Pointer[refusal] // the latest connection the node refused
	probing atomic.Bool             // a probe is under way
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

func newPipeline(rdb redis.UniversalClient, timeout time.Duration, failed func(error)) *pipeline {
	p := &pipeline{
		rdb: rdb, timeout: timeout, failed: failed,
		wake: make(chan struct{}, 1), slots: make(chan struct{}, maxBatches), stop: make(chan struct{}),
	}
	p.cluster, _ = rdb.(*redis.ClusterClient)
	p.wg.Add(1)
	go p.dispatch()
	return p
}

// do queues an op and waits for its result, or for ctx to end.
func (p *pipeline) do(o *op) (redis.Cmder, error) {
	o.done = make(chan opResult, 1)
	if !p.enqueue(o) {
		return nil, ErrClosed
	}
	select {
	case r := <-o.done:
		return r.cmd, r.err
	case <-o.ctx.Done():
		return nil, callerGone{o.ctx.Err()}
	}
}

func (p *pipeline) enqueue(o *op) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.queue = append(p.queue, o)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return true
}

// dispatch sends what has queued, a batch at a time, while a slot is free.
func (p *pipeline) dispatch() {
	defer p.wg.Done()
	for {
		select {
		case <-p.wake:
		case <-p.stop:
			return
		}
		for {
			select {
			case p.slots <- struct{}{}:
			case <-p.stop:
				return
			}
			batch := p.take()
			if len(batch) == 0 {
				<-p.slots
				break
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.send(batch)
				<-p.slots
			}()
		}
	}
}

// take removes the next batch from the queue: ops in order, up to
// maxBatchOps and maxBatchLen bytes (at least one op).
func (p *pipeline) take() []*op {
	p.mu.Lock()
	defer p.mu.Unlock()
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

// send sends one batch, split by Cluster node so a node that stalls holds
// up only its own ops, and answers each op.
func (p *pipeline) send(batch []*op) {
	live := batch[:0]
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.done <- opResult{err: callerGone{err}} // the caller left: not sent
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	groups := p.byNode(live)
	if len(groups) == 1 {
		p.exchange(groups[0])
		return
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.exchange(g)
		}()
	}
	wg.Wait()
}

// group is the ops of a batch that go to one node.
type group struct {
	ops  []*op
	node nodeRef
}

// nodeRef names a node and how to probe it.
type nodeRef struct {
	addr   string // "" off a Cluster
	client redis.UniversalClient
}

// byNode splits ops by the Cluster master that serves their keys (one
// group off a Cluster, or when the slot map is not known yet).
func (p *pipeline) byNode(ops []*op) []group {
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

// liveness returns what is known of node's health.
func (p *pipeline) liveness(addr string) *liveness {
	if l, ok := p.nodes.Load(addr); ok {
		return l.(*liveness)
	}
	l, _ := p.nodes.LoadOrStore(addr, &liveness{breaker: p.newBreaker(addr)})
	return l.(*liveness)
}

// breakerOpen reports whether the breaker of any node is open or half-open.
func (p *pipeline) breakerOpen() bool {
	open := false
	p.nodes.Range(func(_, l any) bool {
		open = l.(*liveness).breaker.open()
		return !open
	})
	return open
}

// probe checks node, unless a probe is under way, bounded by half of
// RedisTimeout: a connection opened with the client's own dialer (a node
// with a plain client only), whose refusal is recorded, then a PING, whose
// answer marks the node as heard from.
func (p *pipeline) probe(node nodeRef, l *liveness) {
	if !l.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.probing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout/2)
		defer cancel()
		if c, ok := node.client.(*redis.Client); ok {
			o := c.Options()
			conn, err := o.Dialer(ctx, o.Network, o.Addr)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					l.refused.Store(&refusal{err: err, at: time.Now()})
					p.note(err)
				}
				return
			}
			conn.Close()
		}
		if err := node.client.Ping(ctx).Err(); err == nil {
			l.heard.Store(time.Now().UnixNano())
		}
	}()
}

// exchange runs ops as one pipeline through the circuit breaker, bounded
// by RedisTimeout plus the time their payload needs, then sends scripts the
// server did not have (NOSCRIPT) with their source, queues again the ops
// that got a "not now" reply (LOADING, BUSY, TRYAGAIN, ...) while their
// RedisTimeout lasts, and answers the rest.
func (p *pipeline) exchange(g group) {
	ops := g.ops
	run := func(ops []*op, build func(*op) func(context.Context, redis.Pipeliner) redis.Cmder) ([]redis.Cmder, error) {
		return p.run(g.node, ops, build)
	}
	cmds, err := run(ops, func(o *op) func(context.Context, redis.Pipeliner) redis.Cmder { return o.build })
	if err == nil {
		var again []*op
		for i, o := range ops {
			if o.rebuild != nil && cmds[i].Err() != nil && strings.HasPrefix(cmds[i].Err().Error(), "NOSCRIPT") {
				again = append(again, o)
			}
		}
		if len(again) > 0 {
			var re []redis.Cmder
			re, err = run(again, func(o *op) func(context.Context, redis.Pipeliner) redis.Cmder { return o.rebuild })
			for i, j := 0, 0; err == nil && i < len(ops); i++ {
				if j < len(again) && ops[i] == again[j] {
					cmds[i] = re[j]
					j++
				}
			}
		}
	}
	for i, o := range ops {
		if err != nil {
			o.done <- opResult{err: err}
			continue
		}
		cerr := cmds[i].Err()
		if notNow(cerr) && p.retryLater(o) {
			continue
		}
		if cerr != nil && !errors.Is(cerr, redis.Nil) {
			p.note(cerr)
		}
		o.done <- opResult{cmd: cmds[i]}
	}
}

// run sends one pipeline of ops to node, built by build, and waits for it
// RedisTimeout plus the transfer time of the ops' payload, longer while the
// node shows it is alive (see the top of this file). The client may wait
// longer still (its ReadTimeout), in a goroutine of its own; its late result
// is dropped.
func (p *pipeline) run(node nodeRef, ops []*op, build func(*op) func(context.Context, redis.Pipeliner) redis.Cmder) ([]redis.Cmder, error) {
	size := 0
	for _, o := range ops {
		size += o.size
	}
	bound := p.timeout + time.Duration(float64(size)/transferRate*float64(time.Second))
	live := p.liveness(node.addr)
	var cmds []redis.Cmder
	err := live.breaker.run(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), maxStalls*bound)
		defer cancel()
		type result struct {
			cmds []redis.Cmder
			err  error
		}
		done := make(chan result, 1)
		go func() {
			pipe := p.rdb.Pipeline()
			out := make([]redis.Cmder, len(ops))
			for i, o := range ops {
				out[i] = build(o)(ctx, pipe)
			}
			_, err := pipe.Exec(ctx)
			if err != nil && !isReplyError(err) {
				// Noted even when the wait below gave up: a refused
				// connection that go-redis reports only after its own dial
				// retries still names the cause of later errors.
				p.note(err)
				done <- result{err: err}
				return
			}
			done <- result{cmds: out}
		}()
		// The window is the last RedisTimeout before the deadline (or since
		// the batch was sent, if later): at the deadline, a node heard from
		// in it is alive; before, a node silent in it so far is probed.
		sent := time.Now()
		deadline := sent.Add(bound)
		tick := time.NewTicker(min(probeAfter, p.timeout/4))
		defer tick.Stop()
		for {
			select {
			case r := <-done:
				if r.err == nil {
					live.heard.Store(time.Now().UnixNano())
				}
				cmds = r.cmds
				return r.err
			case <-tick.C:
			}
			now := time.Now()
			if r := live.refused.Load(); r != nil && r.at.After(sent) {
				return unreachableError{r.err}
			}
			window := deadline.Add(-p.timeout)
			if window.Before(sent) {
				window = sent
			}
			heard := time.Unix(0, live.heard.Load()).After(window)
			switch {
			case now.Before(deadline):
				if !heard {
					p.probe(node, live)
				}
			case heard && now.Sub(sent) < (maxStalls-1)*bound:
				deadline = now.Add(p.timeout) // alive, only slow
			default:
				return p.timeoutError(now.Sub(sent).Round(time.Millisecond))
			}
		}
	})
	if err != nil {
		if redisFailed(err) && p.failed != nil {
			p.failed(err) // on a Cluster: reload the slot map (go-redis does it at most every 200ms)
		}
		return nil, err
	}
	return cmds, nil
}

// retryLater queues o again after a short pause, if its RedisTimeout since
// the first "not now" reply has not run out. It reports whether it did.
func (p *pipeline) retryLater(o *op) bool {
	now := time.Now()
	if o.retryBy.IsZero() {
		o.retryBy = now.Add(p.timeout)
	}
	if now.After(o.retryBy) || o.ctx.Err() != nil {
		return false
	}
	p.wg.Add(1)
	time.AfterFunc(min(50*time.Millisecond, o.retryBy.Sub(now)), func() {
		defer p.wg.Done()
		if !p.enqueue(o) {
			o.done <- opResult{err: ErrClosed}
		}
	})
	return true
}

// note remembers err as the latest error from Redis.
func (p *pipeline) note(err error) {
	var gone callerGone
	if errors.As(err, &gone) || errors.Is(err, ErrCircuitOpen) || errors.Is(err, ErrRedisTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	p.lastMu.Lock()
	p.last = lastError{err: err, at: time.Now()}
	p.lastMu.Unlock()
}

// timeoutError is the error of a batch that got no reply within bound. It
// names the latest error Redis calls got (lastError): a refused connection
// explains a silence better than the silence itself.
func (p *pipeline) timeoutError(bound time.Duration) error {
	if last := p.lastError(); last != nil {
		return fmt.Errorf("%w (%v; %w)", ErrRedisTimeout, bound, last)
	}
	return fmt.Errorf("%w (%v)", ErrRedisTimeout, bound)
}

// lastError describes the latest error Redis calls got, if one came in the
// last minute, or returns nil.
func (p *pipeline) lastError() error {
	p.lastMu.Lock()
	last := p.last
	p.lastMu.Unlock()
	if last.err == nil || time.Since(last.at) > time.Minute {
		return nil
	}
	return fmt.Errorf("latest error from Redis %v ago: %w", time.Since(last.at).Round(time.Millisecond), last.err)
}

// close stops the dispatcher and fails queued ops with ErrClosed. It does
// not wait for batches in flight: a client that keeps waiting on a silent
// Redis (a long ReadTimeout) would hold Close up; their goroutines end when
// the client gives up or Redis answers.
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
	for _, o := range queued {
		o.done <- opResult{err: ErrClosed}
	}
}

// unreachableError is the error of a batch sent to a node that refuses
// connections.
type unreachableError struct{ err error }

func (e unreachableError) Error() string { return "corral: Redis unreachable: " + e.err.Error() }
func (e unreachableError) Unwrap() error { return e.err }

// unreachable reports whether err says Redis could not be reached at all
// (a connection refused or not made), rather than failing after a command
// was sent.
func unreachable(err error) bool {
	var u unreachableError
	var op *net.OpError
	return errors.As(err, &u) || errors.As(err, &op) && op.Op == "dial"
}

// notNow reports whether err is a reply by which a live Redis says "not
// now": it is loading its data, busy with a script, failing over, or moving
// the slot. Such an op is tried again within RedisTimeout.
func notNow(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// isReplyError reports whether err is an error reply of Redis to one
// command (which leaves the others of a pipeline answered), rather than a
// failure of the exchange.
func isReplyError(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}
