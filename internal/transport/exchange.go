package transport

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// A batch on its way: split by node, sent through the node's breaker and
// under the monitor's watch, and its replies handed out.

// send sends one batch, split by Cluster master so a node that stalls holds
// up only its own ops, and answers each op. It reports false when it was
// given up on while the client waited (the sender then retires).
func (p *Pipeline) send(batch []*Op) bool {
	live := batch[:0]
	for _, o := range batch {
		if err := o.Ctx.Err(); err != nil {
			o.finish(Result{Err: callerGone{err}}) // the caller left: not sent
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return true
	}
	groups := p.byNode(live)
	if len(groups) == 1 {
		return p.exchange(groups[0], true)
	}
	// The other masters' groups go in goroutines of their own, so a master
	// that stalls holds up only its own ops.
	for _, g := range groups[1:] {
		go p.exchange(g, false)
	}
	return p.exchange(groups[0], true)
}

// group is the ops of a batch that go to one node.
type group struct {
	ops  []*Op
	node nodeRef
}

// nodeRef names a node and the client that reaches it.
type nodeRef struct {
	addr   string // "" off a Cluster
	client redis.UniversalClient
}

// byNode splits ops by the Cluster master that serves their keys (one
// group off a Cluster), or the node an op is bound to (DoEach). On a
// Cluster a batch is sent on the master's own client, so that its TIME is
// that master's clock; a command whose slot has moved meanwhile gets MOVED
// or ASK and is sent again.
func (p *Pipeline) byNode(ops []*Op) []group {
	if p.cluster == nil {
		return []group{{ops: ops, node: nodeRef{client: p.rdb}}}
	}
	index := map[string]int{}
	var groups []group
	for _, o := range ops {
		ref := nodeRef{client: p.rdb}
		if o.node != nil {
			ref = *o.node
		} else if m, err := p.cluster.MasterForKey(context.Background(), o.Key); err == nil {
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
// are queued again while their timeout lasts. It reports false when the
// watch gave up on the batch while the client still waited. sender says
// the calling goroutine is a sender (counted out if given up on).
func (p *Pipeline) exchange(g group, sender bool) bool {
	if g.ops = p.admit(g, p.liveness(g.node.addr)); len(g.ops) == 0 {
		return true
	}
	p.batches.Add(1)
	b, err := p.begin(g, sender)
	if err != nil {
		for _, o := range g.ops {
			o.finish(Result{Err: err})
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
	var again []*Op // NOSCRIPT: queued again together, to go in one batch behind one source
	for i, o := range g.ops {
		if o.Clock && now == 0 {
			o.timed = true // no clock: the op whose reply was to carry it failed; next time, TIME
			again = append(again, o)
		} else if p.answer(o, cmds[i], now) {
			again = append(again, o)
		}
	}
	if len(again) > 0 && !p.enqueueAll(again) {
		for _, o := range again {
			o.finish(Result{Err: ErrClosed})
		}
	}
	return true
}

// answer answers o with its command's reply, unless the reply says to send
// it again: later ("not now"), or with the script's source (NOSCRIPT),
// which answer leaves to its caller (again).
func (p *Pipeline) answer(o *Op, cmd redis.Cmder, now int64) (again bool) {
	cerr := cmd.Err()
	c := Classify(cerr)
	switch {
	case c&NoScript != 0 && o.Rebuild != nil && o.noscript < 2:
		if o.noscript++; o.Script == nil {
			o.noscript = 2
		}
		return true
	case c&NotNow != 0 && p.retryLater(o):
		if p.cluster != nil && c&Moved != 0 {
			p.failed(cerr) // the slot moved: reload the slot map
		}
		return false
	case cerr != nil && !errors.Is(cerr, redis.Nil):
		p.note(cerr)
	}
	o.finish(Result{Cmd: cmd, Now: now})
	return false
}

// exec runs g's ops as one pipeline on the node's client, with the
// server's clock first when an op needs it.
func (p *Pipeline) exec(g group, ctx context.Context) (cmds []redis.Cmder, now int64, err error) {
	pipe := g.node.client.Pipeline()
	var clock *redis.TimeCmd
	clocked, timed := -1, false // the op ahead of those needing the clock whose reply carries it; TIME all the same
	for i, o := range g.ops {
		switch {
		case o.Clock:
			timed = timed || clocked < 0 || o.timed
		case o.Clocked != nil && clocked < 0:
			clocked = i
		}
	}
	if timed {
		clock = pipe.Time(ctx)
	}
	cmds = make([]redis.Cmder, len(g.ops))
	var sourced []*redis.Script // the scripts whose source goes in this batch
	for i, o := range g.ops {
		switch {
		case o.noscript == 1 && !slices.Contains(sourced, o.Script):
			sourced = append(sourced, o.Script)
			fallthrough
		case o.noscript == 2:
			cmds[i] = o.Rebuild(ctx, pipe)
		case o.Build == nil:
			cmds[i] = o.newRead(ctx)
			_ = pipe.Process(ctx, cmds[i]) // queued: its error is the command's, after Exec
		default:
			cmds[i] = o.Build(ctx, pipe)
		}
	}
	sent := time.Now()
	if err := runBatch(ctx, g.node.client, pipe, cmds, clock); err != nil {
		return nil, 0, err
	}
	if clock != nil {
		t, err := clock.Result()
		if err != nil {
			return nil, 0, err
		}
		now = t.UnixMilli()
		p.liveness(g.node.addr).synced(t, sent)
	} else if clocked >= 0 {
		if t, ok := g.ops[clocked].Clocked(cmds[clocked]); ok {
			now = t.UnixMilli()
			p.liveness(g.node.addr).synced(t, sent)
		} // else 0: the ops needing the clock are sent again (exchange)
	}
	return cmds, now, nil
}

// runBatch sends the commands built in pipe: one command alone (Process), on
// the client's main pool, where a pipeline of go-redis's (v9.23 on) takes a
// connection of its own pool, which holds none until a pipeline dials one.
// A process's first pipeline then waits for a dial and go-redis's
// handshake, two round trips more, where the main pool's connection, used
// by the client's other commands (the inline reads), is likely warm: under
// a burst of callers each costs milliseconds (docs/design.md, section 3.3).
// err is set only when no reply came, or Exec failed on a reply that is
// none of the commands' own (answered).
func runBatch(ctx context.Context, client redis.UniversalClient, pipe redis.Pipeliner, cmds []redis.Cmder, clock *redis.TimeCmd) error {
	if len(cmds) == 1 && clock == nil {
		return process(ctx, client, cmds[0])
	}
	if _, err := pipe.Exec(ctx); err != nil && !(Says(err, Reply) && answered(cmds, clock)) {
		return err
	}
	return nil
}

// process sends cmd alone (Process). err is set only when no reply came,
// or the reply refused the client (WRONGPASS at the connection's set-up),
// which fails a pipeline's Exec with no command run: the exchange's
// failure, not the command's own reply, though Process sets it on cmd.
func process(ctx context.Context, client redis.UniversalClient, cmd redis.Cmder) error {
	if err := client.Process(ctx, cmd); err != nil && (!Says(err, Reply) || Says(err, ClientRefused)) {
		return err
	}
	return nil
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
