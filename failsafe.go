package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/failopen"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
)

// Memory is the last line: while this process cannot use Redis for a call,
// a value it holds (a near copy, what a fail-open load returned) is served
// instead of calling the origin (fail-safe), and fail-open loads of a key
// are one at a time (opens). The rules, and their bounds: docs/design.md,
// section 4.4; the mechanics are internal/failopen's (Memory, Group).

// FailSafeOptions configures what a Cache serves from its own memory while
// it cannot use Redis for a call (see Options.FailSafe). The zero value of
// each field means its default.
type FailSafeOptions struct {
	// TTL is how long a near-cache copy may be served while Redis cannot be
	// used, counted from the read of Redis it came from, or from the
	// fail-open load that made it; never past its soft expiry. Copies are
	// kept in the near cache this long (within its Size and MaxBytes), so a
	// longer TTL holds more of them. Default 1 min.
	TTL time.Duration

	// Throttle is how long, without the near cache, a value a fail-open
	// load returned (or its ErrNotFound) is served from memory while Redis
	// cannot be used, before the key is loaded again: each key costs at
	// most one origin load per process per Throttle. Never past the
	// value's soft TTL (NegativeTTL for ErrNotFound). Default 1s.
	Throttle time.Duration

	// Size is the most values kept for Throttle (without the near cache).
	// Default 10,000.
	Size int

	// MaxBytes bounds the total size, in bytes, of those values. Default
	// 16 MiB.
	MaxBytes int64
}

// Defaults of FailSafeOptions.
const (
	DefaultFailSafeTTL      = time.Minute
	DefaultFailSafeThrottle = time.Second
	DefaultFailSafeSize     = 10_000
	DefaultFailSafeMaxBytes = 16 << 20
)

// memory is what this process holds for fail-safe use.
func (c *Cache) memory() failopen.Memory {
	return failopen.Memory{Near: c.near, Held: c.held, Throttle: c.opts.FailSafe.Throttle}
}

// failSafe answers a call of key from memory, when this process holds a
// value it may serve while Redis cannot be used (see the top of this
// file): a near copy (a decoded one is encoded again: the caller decodes
// it), or a fail-open load's result.
func (c *Cache) failSafe(key string) (answer, bool) {
	return c.failSafeFrom(key, true)
}

// failSafeFrom is failSafe; copies says near copies may answer, not only
// fail-open results: not when Redis answered that it has no entry but
// refused to write (OOM, READONLY), since a copy may be older than a Delete
// Redis applied.
func (c *Cache) failSafeFrom(key string, copies bool) (answer, bool) {
	if c.opts.DisableFailSafe {
		return answer{}, false
	}
	f, ok := c.memory().Find(key, copies)
	if !ok || c.groups.Judge(f.Born, f.Tags) == epochs.Hard { // what this process knows of the group invalidations
		return answer{}, false
	}
	a := answer{val: f.Bytes(), err: f.Err, out: outFailSafe}
	if f.Decoded { // a typed call's copy: its caller decodes it again
		b, err := c.opts.Codec.Marshal(f.Val)
		if err != nil {
			return answer{}, false
		}
		a.val = b
	}
	return a, true
}

// opened is what a fail-open load (failopen.Load) returned.
type opened struct {
	val   []byte
	took  time.Duration
	fr    freshness
	err   error
	asked bool // the loader called IsFailOpen: its result may not be a leased load's
}

// openLoad is a fail-open load of a key (Cache.opens).
type openLoad = failopen.Load[opened]

// loadOpen runs a fail-open load of key with l, or joins the one under way
// in this process, and keeps what it returns for fail-safe use; or, when
// one ended just before (it kept its result before it left opens), answers
// from memory: held is then set, and fr the zero value. ctx is the load's
// (runLoad's): it bounds a joiner's wait too.
func (c *Cache) loadOpen(ctx context.Context, key string, l loader, copies bool) (val []byte, took time.Duration, fr freshness, held bool, err error) {
	o, mine, a, held := c.openLoadOf(key, copies)
	switch {
	case held:
		return a.val, 0, freshness{}, true, a.err
	case !mine:
		r := c.joinOpen(ctx, o)
		return r.val, r.took, r.fr, false, r.err
	}
	c.runOpen(ctx, key, l, o)
	return o.Result.val, o.Result.took, o.Result.fr, false, o.Result.err
}

// openLoadOf returns key's fail-open load: the one under way (mine false),
// or a new one for the caller to run (mine true, with runOpen); or, held,
// the answer from memory a (see loadOpen).
func (c *Cache) openLoadOf(key string, copies bool) (o *openLoad, mine bool, a answer, held bool) {
	o, mine = c.opens.Claim(key, func() bool {
		a, held = c.failSafeFrom(key, copies)
		return held
	})
	return o, mine, a, held
}

// joinOpen waits for o, another caller's fail-open load, or for ctx.
func (c *Cache) joinOpen(ctx context.Context, o *openLoad) opened {
	select {
	case <-o.Done():
		return o.Result
	case <-ctx.Done():
		return opened{err: c.closedErr(ctx.Err())}
	}
}

// runOpen runs o, key's fail-open load with l, that openLoadOf gave the
// caller, keeps its result, and answers its joiners.
func (c *Cache) runOpen(ctx context.Context, key string, l loader, o *openLoad) {
	m := c.memory().Mark()
	lctx, mark := failopen.Marked(ctx)
	r := &o.Result
	r.val, r.took, r.fr, r.err = c.runLoad(lctx, key, l)
	r.asked = mark.Asked()
	c.hold(key, r, m)
	o.End()
	// It stays in opens for RedisTimeout, ended, for a leased load of the
	// key to take its result (leasedLoad) rather than ask the origin again
	// as Redis comes back; a Delete or Set of the key (forget) drops it.
	c.opens.DropAfter(c.opts.RedisTimeout, key, o)
}

// hold keeps what the fail-open load o returned for fail-safe use (see the
// top of this file), unless an invalidation of the key came since m was
// taken, before the load: a Delete that returned during it must not be
// undone by it.
func (c *Cache) hold(key string, o *opened, m failopen.Mark) {
	if c.opts.DisableFailSafe || !o.fr.stored() && o.err == nil {
		return
	}
	k := failopen.Kept{Val: o.val, Err: o.err, Soft: o.fr.soft, Took: o.took}
	switch {
	case o.err == nil:
		if len(o.val) > c.opts.MaxValueBytes {
			return
		}
		if o.fr.exact {
			k.Soft -= time.Since(o.fr.from)
		}
	case isNotFound(o.err):
		k.Soft, k.Err = c.opts.NegativeTTL, ErrNotFound
	default:
		return // a failure is not kept: the next caller tries again
	}
	c.memory().Keep(key, k, m)
}

// forget drops what this process holds of key for fail-safe use, and lets
// no fail-open load under way keep its result: key was just invalidated
// (Delete, Set, or one queued for Redis).
func (c *Cache) forget(key string) {
	c.opens.Drop(key, nil)
	c.memory().Forget(key)
}

// forgetAll is forget of every key (a group invalidation).
func (c *Cache) forgetAll() {
	c.opens.DropAll()
	c.memory().ForgetAll()
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
		wctx, stop := failopen.JoinContext(f.ctx, c.ctx, c.loads) // a load ending in Close's grace answers f's callers
		defer stop()
		if open.val, open.took, open.fr, held, open.err = c.loadOpen(wctx, f.key, f.load, copies); held { // one at a time, kept for fail-safe use
			out = outFailSafe
		}
	} else {
		lctx, _ := failopen.Marked(f.ctx)
		open.val, open.took, open.fr, open.err = c.runLoad(lctx, f.key, f.load)
	}
	a := answer{val: open.val, err: open.err, out: out}
	if open.err == nil {
		a.until = open.fr.until(near.Clock(), open.fr.soft)
	}
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
