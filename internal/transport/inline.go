package transport

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Inline reads. A read op (one with Op.Read: the Cache's peek of a hit),
// handed to a sender goroutine and back, costs two goroutine switches, a
// quarter of a hit's time on a loopback Redis. So Send may run it in the
// caller's own goroutine, as a plain GET would: the one command on the
// client's main pool, with Result.Now the server's clock as estimated from
// the latest TIME read from that node (below; when that is older than
// clockFresh, the read goes after TIME in a pipeline, which syncs the clock
// again). It does so when that cannot leave the caller stuck past corral's
// bounds:
//
//   - the client bounds its socket reads and writes by the context's
//     deadline (go-redis's ContextTimeoutEnabled, with ReadTimeout and
//     WriteTimeout not -2): the read is given InlineBound, or until the
//     caller's deadline (Op.ReadBy) if that comes first;
//   - the node's circuit breaker is closed, no probe of it is unanswered,
//     and no inline read failed in the last inlineRest;
//   - fewer than GOMAXPROCS inline reads are under way: under a burst the
//     pipeline's shared round trips serve more calls than the pool has
//     connections.
//
// A read that fails or gets no answer within InlineBound is not a verdict on
// Redis: the op goes on through the pipeline, whose monitor tells slow from
// down (liveness.go), and inline reads rest for inlineRest. A call that was
// reading inline when Redis stalled thus waits at most InlineBound more than
// a pipelined one, and never past its own deadline; a cancellation without
// a deadline is seen once the read ends (go-redis does not watch the
// context's Done during a read). Only reads go inline, so sending one again
// is harmless.

const (
	// InlineBound is an inline read's time limit, capped at the timeout.
	InlineBound = ProbeAfter
	inlineRest  = time.Second
)

// inliner is the pipeline's state for inline reads.
type inliner struct {
	slot    atomic.Pointer[doneSlot] // the Done channel of the reads beginning now
	enabled bool                     // the client bounds its I/O by the context's deadline
	bound   time.Duration            // an inline read's time limit
	limit   int32                    // inline reads under way at most
	running atomic.Int32             // inline reads under way
	restTo  atomic.Int64             // no inline read before this time (Unix ns) after one failed
}

func (in *inliner) init(rdb redis.UniversalClient, timeout time.Duration) {
	in.enabled = boundsByContext(rdb)
	in.bound = min(InlineBound, timeout)
	in.limit = int32(runtime.GOMAXPROCS(0))
}

// SlowClient is the warning a Pipeline gives once, as it starts, on a
// client that does not bound its reads by the context: its hits go through
// the sender goroutines, two goroutine switches more each.
const SlowClient = "corral: the Redis client does not bound its reads by the context, so each hit goes through corral's pipeline goroutines (two goroutine switches and a dozen allocations more): " +
	"give go-redis ContextTimeoutEnabled: true (and ReadTimeout, WriteTimeout not -2)"

// boundsByContext reports whether rdb applies a context's deadline to its
// socket reads and writes.
func boundsByContext(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	case *redis.ClusterClient:
		o := c.Options()
		return o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
	}
	return false
}

// inline runs the read o in the calling goroutine, answering it, when the
// rules above allow; it reports false, leaving o unanswered, when o is to go
// through the pipeline.
func (p *Pipeline) inline(o *Op) bool {
	in := &p.inliner
	if !in.enabled || p.ctx.Err() != nil {
		return false
	}
	t := time.Now()
	if t.UnixNano() < in.restTo.Load() {
		return false
	}
	if in.running.Add(1) > in.limit {
		in.running.Add(-1)
		return false
	}
	defer in.running.Add(-1)
	o.one[0] = o
	g := group{ops: o.one[:], node: nodeRef{client: p.rdb}}
	if p.cluster != nil {
		g = p.byNode(g.ops)[0]
	}
	live := p.liveness(g.node.addr)
	if live.unheard.Load() != 0 || live.breaker.open() || live.heard.Load() == 0 {
		// The monitor and the breaker decide until the node answers
		// (again): a node that never answered may refuse connections, and
		// only the pipeline's probe finds that out without sitting out
		// the client's dial retries.
		return false
	}
	at, short := t.Add(in.bound), false
	if !o.ReadBy.IsZero() && o.ReadBy.Before(at) {
		at, short = o.ReadBy, true // the caller's deadline: it must not wait past it
	}
	o.dctx = deadlineCtx{Context: p.ctx, at: at, done: in.doneBy(t)}
	ctx := &o.dctx
	cmd, now, err := p.inlineRead(g, live, ctx, t)
	if err == nil && Says(cmd.Err(), NotNow) {
		err = cmd.Err()
	}
	if err != nil {
		switch {
		case Says(err, RefusedDial|AuthRefused):
			p.trip(g.node, live, err) // refused by the server: the node cannot be used
		case !short && errors.Is(err, context.DeadlineExceeded):
			p.lookSoon(g.node, live) // the client waited past inlineWait: is the server gone?
		}
		// A read cut short by its caller's deadline says little of Redis.
		if now := time.Now(); !short || now.Before(at) {
			in.restTo.Store(now.Add(inlineRest).UnixNano())
		}
		return false
	}
	o.finish(Result{Cmd: cmd, Now: now})
	return true
}

// inlineRead sends g's one op: alone when the node's clock is synced (see
// below), otherwise after TIME in a pipeline, which syncs it. err is set
// only when no reply came.
func (p *Pipeline) inlineRead(g group, live *liveness, ctx context.Context, t time.Time) (cmd redis.Cmder, now int64, err error) {
	o := g.ops[0]
	if _, synced := live.serverNow(t); !synced || o.Read == nil {
		cmds, now, err := p.exec(g, ctx)
		if err != nil {
			return nil, 0, err
		}
		live.heard.Store(time.Now().UnixNano())
		return cmds[0], now, nil
	}
	cmd = o.newRead(ctx)
	if err = process(ctx, g.node.client, cmd); err != nil {
		return nil, 0, err
	}
	t = time.Now()
	live.heard.Store(t.UnixNano())
	now, _ = live.serverNow(t) // aged past clockFresh since: still a bound from above
	return cmd, now, nil
}

// newRead makes o's read command (Op.NewRead).
func (o *Op) newRead(ctx context.Context) redis.Cmder {
	if o.NewRead == nil {
		return redis.NewCmd(ctx, o.Read...)
	}
	return o.NewRead(ctx, o.Read...)
}

// Strings is an Op.NewRead whose reply is an array of strings
// (redis.StringSliceCmd, a nil read as ""): one allocation per string, where
// redis.NewCmd's reply of interfaces costs two.
func Strings(ctx context.Context, args ...any) redis.Cmder {
	return redis.NewStringSliceCmd(ctx, args...)
}

// deadlineCtx is ctx with a deadline, and a Done channel shared with the
// other inline reads that began about when it did (doneBy): go-redis bounds
// its socket reads and writes by the deadline, and its waits (a pooled
// connection, the pause between two dials of a refused connection) by Done,
// which closes inlineWait after the read began (slotWidth more at most).
// Without Done, a read that found every pooled connection dead (a killed
// Redis) sat out the client's dial retries: seconds with go-redis's
// defaults; with it, the refusal is the read's error, which trips the node
// (down.go). One timer per slotWidth of inline reads, not one per read.
type deadlineCtx struct {
	context.Context
	at   time.Time
	done chan struct{}
}

func (d *deadlineCtx) Deadline() (time.Time, bool) { return d.at, true }
func (d *deadlineCtx) Done() <-chan struct{}       { return d.done }

func (d *deadlineCtx) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return d.Context.Err()
	}
}

// slotWidth is how close together inline reads begin that share a Done
// channel; inlineWait is how long a read may wait on the client for
// anything but the socket (a free connection, a dial's retry).
const (
	slotWidth  = 10 * time.Millisecond
	inlineWait = 20 * time.Millisecond
)

// doneSlot is the Done channel of the inline reads that began within
// slotWidth of start: it closes when the last of their bounds has passed.
type doneSlot struct {
	start int64 // Unix ns
	done  chan struct{}
}

// doneBy returns the Done channel of an inline read beginning at t.
func (in *inliner) doneBy(t time.Time) chan struct{} {
	now := t.UnixNano()
	s := in.slot.Load()
	if s != nil && now-s.start < int64(slotWidth) && now >= s.start {
		return s.done
	}
	n := &doneSlot{start: now, done: make(chan struct{})}
	if !in.slot.CompareAndSwap(s, n) {
		return in.slot.Load().done // another read began a slot just now
	}
	time.AfterFunc(slotWidth+inlineWait, func() { close(n.done) })
	return n.done
}

// The server's clock without asking for it. Every batch that reads TIME
// also syncs its node's clock: the server's time, paired with the local
// (monotonic) time at which the batch was sent. Within clockFresh of that,
// the server's time now is taken as the server's time then plus the local
// time elapsed since the batch was sent, rounded up. That is never earlier
// than the server's real time (the server read its clock after the batch
// was sent; the clocks' rates differ by parts per million), so an expiry
// read with it may be taken as passed up to a round trip early (the
// caller's script then decides on the server's own clock), never as not
// passed once it has.
const clockFresh = time.Second

// clockSync is a node's clock read by a batch.
type clockSync struct {
	server time.Time // the server's TIME
	sent   time.Time // when the batch was sent, with the local monotonic clock
}

// synced records the server's time t, read by a batch sent at sent.
func (l *liveness) synced(t, sent time.Time) {
	l.clock.Store(&clockSync{server: t, sent: sent})
}

// serverNow returns the server's time (Unix ms) at local time t, and
// whether the clock was synced in the last clockFresh (if not, the time is
// still never earlier than the server's, but may be later by the clocks'
// drift since; 0 if never synced).
func (l *liveness) serverNow(t time.Time) (int64, bool) {
	s := l.clock.Load()
	if s == nil {
		return 0, false
	}
	elapsed := t.Sub(s.sent)
	us := s.server.UnixMicro() + elapsed.Microseconds() + 1
	return (us + 999) / 1000, elapsed >= 0 && elapsed <= clockFresh
}
