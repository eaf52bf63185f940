package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/failopen"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
)

// A caller whose deadline comes before corral would give up on a silent
// Redis fails open in time to run the loader before it (rescue): when and
// why, docs/design.md, section 4.4 ("Rescue").

// rescue is one caller's plan to fail open before its deadline.
type rescue = failopen.Rescue

// planRescue returns the rescue of a call of key with ctx, beginning now:
// none without a deadline, or with one later than corral's own verdict on a
// silent Redis, or with fail-open off.
func (c *Cache) planRescue(ctx context.Context, key string) rescue {
	r := c.rescueOf(ctx, 1, func(int) string { return key })
	if !r.At.IsZero() {
		r.Name = wire.EntryName(c.opts.Prefix, key)
	}
	return r
}

// rescuable reports whether a call with ctx may need a rescue
// (planRescue's is not none).
func (c *Cache) rescuable(ctx context.Context) bool {
	if c.opts.DisableFailOpen {
		return false
	}
	deadline, ok := ctx.Deadline()
	return failopen.Needed(deadline, ok, c.opts.RedisTimeout+transport.MonitorTick)
}

// rescueOf is the rescue of a call with ctx of n keys (key(i) the i-th),
// beginning now: planned with the longest last load of the keys, or
// half-way to the deadline when any is unknown.
func (c *Cache) rescueOf(ctx context.Context, n int, key func(i int) string) rescue {
	if c.opts.DisableFailOpen {
		return rescue{}
	}
	deadline, ok := ctx.Deadline()
	return failopen.Plan(deadline, ok, c.opts.RedisTimeout+transport.MonitorTick, n,
		func(i int) (time.Duration, bool) { return c.memory().LastLoad(key(i)) })
}

// due reports whether r's caller is to be rescued now: nothing heard from
// the key's node since its attempt began.
func (c *Cache) due(r *rescue) bool {
	return !c.store.pipe.HeardSince(r.Name, r.Began)
}

// rescued answers a caller of key rescued (see the top of this file): from
// memory, or by the key's fail-open load.
func (c *Cache) rescued(ctx context.Context, key string, load loader) answer {
	if a, ok := c.failSafe(key); ok {
		return a
	}
	c.opts.Logger.Debug("corral: Redis has not answered, and the caller's deadline is near: calling the loader directly (fail-open)", "key", key)
	o, mine, a, held := c.openLoadOf(key, true)
	switch {
	case held:
		return a
	case mine:
		c.runOpenDetached(ctx, key, load, o, func() {})
	}
	r := c.joinOpen(ctx, o)
	return answer{val: r.val, err: r.err, out: rescuedOutcome(ctx, r.err)}
}

// rescuedOutcome is how a rescued caller whose wait for its fail-open load
// ended with err was answered: by the load, or not at all (its context
// ended first).
func rescuedOutcome(ctx context.Context, err error) outcome {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return outNone
	}
	return outFailOpen
}

// runOpenDetached runs o, key's fail-open load with l, in a goroutine of
// its own that Close waits for: a rescued caller that started it still
// leaves at its own deadline (joinOpen), as a flight's caller does, while
// the load goes on for the others and for memory, bounded by LoadTimeout.
// settled is called once the load ended or could not begin (a FetchMany's
// batch must not wait for a key whose load never began).
func (c *Cache) runOpenDetached(ctx context.Context, key string, l loader, o *openLoad, settled func()) {
	if !c.tasks.Start(func() { defer settled(); c.runOpen(context.WithoutCancel(ctx), key, l, o) }) {
		o.Result.err = ErrClosed
		c.opens.Drop(key, o)
		o.End()
		settled()
	}
}

// A FetchMany is rescued the same way, once for the whole call: its keys
// whose peek or flight still waits on a node that said nothing since the
// call began are answered from memory, or by one call of its loadMany for
// them all, each key's load shared with the process's other fail-open
// loads of it (loadOpen), as a single key's is.

// planRescueMany returns the rescue of a FetchMany of calls with ctx: as
// planRescue, with the longest last load of its keys (half the time left
// when any is unknown).
func (c *Cache) planRescueMany(ctx context.Context, calls []keyCall) rescue {
	return c.rescueOf(ctx, len(calls), func(i int) string { return calls[i].key })
}

// silentFor reports whether the node of key said nothing since r began.
func (c *Cache) silentFor(r *rescue, key string) bool {
	return !c.store.pipe.HeardSince(wire.EntryName(c.opts.Prefix, key), r.Began)
}

// waitAll waits for the calls' peeks or flights (done: peekDone or
// flightDone) until the rescue fires (true) or ctx ends.
var waitAll = failopen.WaitAll[keyCall]

// peekDone and flightDone are waitAll's done for peeks and flights.
func peekDone(k *keyCall) <-chan struct{} {
	if k.pc == nil {
		return nil
	}
	return k.pc.done
}

func flightDone(k *keyCall) <-chan struct{} {
	if k.f == nil {
		return nil
	}
	return k.f.done
}

// rescueWaiting rescues the calls (see above) whose wait (done: peekDone
// or flightDone) has not ended on a silent node: a peek is dropped (they
// need no flight then); a flight is left, as a flight's caller leaves it,
// and only while its fetch.lua is out.
func (c *Cache) rescueWaiting(ctx context.Context, r *rescue, calls []keyCall, ml manyLoad, done func(k *keyCall) <-chan struct{}) {
	var ks []*keyCall
	for i := range calls {
		k := &calls[i]
		ch := done(k)
		if ch == nil || failopen.IsClosed(ch) || !c.silentFor(r, k.key) {
			continue
		}
		if k.f != nil {
			if !k.f.asking.Load() {
				continue
			}
			c.flights.Leave(k.f.key, k.f, k.f.stop)
		}
		k.pc, k.f = nil, nil
		ks = append(ks, k)
	}
	c.rescueMany(ctx, ks, ml)
}

// rescueMany answers the rescued calls ks: from memory, or by their keys'
// fail-open loads, each waited for until the caller's deadline at most.
// Those this call starts go to one call of ml, detached from the caller;
// those another caller runs are joined, never waited for by that call of
// ml (two rescued FetchManys of the same keys would wait for each other).
func (c *Cache) rescueMany(ctx context.Context, ks []*keyCall, ml manyLoad) {
	if len(ks) == 0 {
		return
	}
	c.opts.Logger.Debug("corral: Redis has not answered, and the caller's deadline is near: calling the loader directly (fail-open)", "keys", len(ks))
	type joined struct {
		k *keyCall
		o *openLoad
	}
	var loads []joined
	b := c.newBatch(context.WithoutCancel(ctx), ml.call, 0)
	for _, k := range ks {
		o, mine, a, held := c.openLoadOf(k.key, true)
		switch {
		case held:
			k.a = a
			continue
		case mine:
			b.Expect(ctx, k.key)                                                        // not paced: does not wait
			c.runOpenDetached(ctx, k.key, ml.loader(b, k.key, ""), o, b.Decider(k.key)) // decided even if no load began (Close)
		}
		loads = append(loads, joined{k, o})
	}
	b.Started()
	for _, j := range loads { // each until the caller's deadline at most, as rescued does
		r := c.joinOpen(ctx, j.o)
		j.k.a = answer{val: r.val, err: r.err, out: rescuedOutcome(ctx, r.err)}
	}
}
