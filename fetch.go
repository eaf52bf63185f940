package corral

import (
	"cmp"
	"context"
	"time"

	"github.com/corralhq/corral/internal/args"
	"github.com/corralhq/corral/internal/flights"
	"github.com/corralhq/corral/internal/near"
)

// Fetch returns key's value: from Redis when an entry is there, else from
// load, run once per key across every process sharing the Redis, however
// many callers ask at once. Concurrent callers in one process share one
// flight; callers in other processes wait for the lease holder's completion
// notice. ttl is the soft TTL of what load returns (spread by Jitter; capped
// at MaxTTL). A call that joins a flight already under way is answered by
// that flight's load and ttl, not its own (like singleflight); a call that
// starts after a Delete or Set of key returned never joins a flight begun
// before it.
//
// load runs detached from ctx (under context.WithoutCancel of the first
// caller's context, bounded by LoadTimeout), so ctx bounds only this call's
// wait: when it ends, Fetch returns ctx.Err() and the load carries on for
// the others. When load returns ErrNotFound (or wraps it), that is cached for
// NegativeTTL and every caller gets ErrNotFound. Any other error reaches every
// caller of that load (errors.Is works in this process; callers in other
// processes get an error wrapping ErrRemoteLoad) and is not cached. A panic in
// load becomes a *PanicError. Since a failure is not cached (unless
// ErrorTTL), a caller in another process whose re-check reaches Redis after
// the failed load handed its lease back is the next caller: it takes the
// lease and loads. Likewise, a load that lost its lease (it expired while
// the process stalled) answers only its own process's callers; callers
// elsewhere get the result of the load that holds the lease now.
// When Redis fails, Fetch calls load directly
// (fail-open, still one load per key in this process) unless
// DisableFailOpen is set.
//
// The returned slice is shared by every caller of the flight (and may be the
// very slice load returned): read it, do not modify it; copy it first if
// you must (bytes.Clone). Sharing keeps a value of many megabytes, asked
// for by many callers at once, from being copied for each. A nil or empty
// value from load is a real value, cached like any other.
//
// Errors: ErrInvalidKey, ErrInvalidTTL, ErrNilLoader, ErrClosed, ErrNotFound,
// ErrLoadTimeout, ErrRemoteLoad, *PanicError, ErrCachedFailure (while a
// failure is cached, with ErrorTTL), ErrPermission (an ACL right missing: the
// loader is not called), ctx.Err(), the loader's own errors, and with
// DisableFailOpen the Redis errors, wrapped: ErrRedisTimeout, ErrCircuitOpen,
// ErrWriteRefused (a miss while Redis refuses writes) and the client's own.
func (c *Cache) Fetch(ctx context.Context, key string, ttl time.Duration, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if c.tracer != nil {
		return c.fetchTraced(ctx, key, ttl, load)
	}
	w := underWay{ttl: ttl}
	if joined, err := c.joinUnderWay(ctx, key, load == nil, &w); err != nil {
		return nil, err // refused (counted)
	} else if !joined {
		return c.serveBytes(ctx, key, ttl, load)
	}
	select { // in this frame, not a function's: joinwait.go
	case <-w.done:
		w.ended = true
	case <-ctx.Done():
	}
	return c.joinedFetch(ctx, key, load, &w)
}

// fetchTraced is Cache.Fetch in a Tracer's scope.
func (c *Cache) fetchTraced(ctx context.Context, key string, ttl time.Duration, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	return traced(c, ctx, key, func(ctx context.Context) ([]byte, error) {
		if err := c.validate(ctx, key, refuse.TTL(ttl), load == nil); err != nil {
			return nil, c.refused(ctx, key, err)
		}
		return c.serveBytes(ctx, key, ttl, load)
	})
}

// serveBytes is serve for Cache.Fetch's arguments, validated. Not
// inlined, nor is joinedFetch: a loader built in Fetch's frame, and
// serve's arguments, would take what the waiters' stack needs there
// (joinwait.go).
//
//go:noinline
func (c *Cache) serveBytes(ctx context.Context, key string, ttl time.Duration, load func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	return c.serve(ctx, key, loader{ttl: ttl, bytes: load})
}

// serve answers Cache.Fetch and Cache.FetchEntry once their arguments are
// validated: from the near cache, or else from Redis (fromRedis). It counts
// the call's outcome.
func (c *Cache) serve(ctx context.Context, key string, load loader) ([]byte, error) {
	var h how
	if c.near != nil {
		if e, ok := c.nearGet(near.Key{Key: key}, &h); ok {
			c.nearHit(ctx, key)
			val, _ := e.Val.([]byte)
			return val, e.Err
		}
	}
	h.draw(c)
	a, keep := c.fromRedis(ctx, key, load, h)
	c.count(ctx, key, a.out)
	if keep != nil { // a.val made an any allocates: only for a copy to keep
		c.keepNear(key, nil, keep, a.val, a.err, len(a.val))
	}
	return a.val, a.err
}

// refuse checks a call's arguments as far as that needs no Cache
// (internal/args), with corral's sentinels.
var refuse = args.Errors{InvalidKey: ErrInvalidKey, InvalidTTL: ErrInvalidTTL, NilLoader: ErrNilLoader}

// validate checks a call's arguments and state, in this order: its key,
// whether the Cache is closed, ttlErr (refuse.TTL of its ttl; nil for a
// call without one), its loader, its context. A nil ctx panics.
func (c *Cache) validate(ctx context.Context, key string, ttlErr error, nilLoader bool) error {
	if err := refuse.Key(ctx, key); err != nil {
		return err
	}
	return c.ready(ctx, ttlErr, nilLoader)
}

// ready is validate for a call of no key (a group invalidation) or of
// many (FetchMany, whose keys are checked one by one).
func (c *Cache) ready(ctx context.Context, ttlErr error, nilLoader bool) error {
	refuse.Context(ctx)
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	return cmp.Or(ttlErr, refuse.Ready(ctx, nilLoader)) // the first of them
}

// how says how a call reads an entry: its XFetch draw, and for Fetch[T] its
// codec version and the soft expiry of an entry it could not decode.
type how struct {
	x       float64 // the XFetch draw (Cache.earlyFactor), once drawn
	drawn   bool
	version string // Options.CodecVersion for Fetch[T]; "" (any) for Cache.Fetch
	skip    int64  // the soft expiry of an entry to take as missing; 0 for none
	listen  bool   // callers contend for the key: its flight listens before it asks (resolve)
}

// fromRedis answers a call from Redis: from a peek when the entry is fresh,
// otherwise from a flight. keep is non-nil when the answer came from a peek
// and the near cache (when on) may keep a copy of it. The caller counts the
// answer's outcome. A call that joined a flight too late for its answer
// (answerFor) asks again (a loop, not a call: this frame is on every
// waiter's stack).
func (c *Cache) fromRedis(ctx context.Context, key string, load loader, h how) (a answer, keep *peekCopy) {
	for a.out = outLate; a.out == outLate; {
		if f, ok := c.flights.JoinRunning(key); ok && h.skip == 0 {
			a, keep = c.awaitFor(ctx, f, load, true, c.joined()), nil
			continue
		} else if ok {
			c.flights.Leave(f.key, f, f.stop)
		}
		var pc *peekCall
		var perr error
		if c.pending(key) {
			perr = errPending // not from Redis until its invalidation lands there (queue.go)
		} else if perr = c.skipped(key); perr == nil {
			var answered bool
			if pc, a, answered, perr = c.peekFor(ctx, key, load, h); answered {
				keep = nil
				continue
			}
		}
		a, keep = c.afterPeekFor(ctx, key, load, h, pc, perr)
	}
	return a, keep
}

// afterPeekFor is fromRedis once the call's peek (pc, or its error perr)
// is known.
func (c *Cache) afterPeekFor(ctx context.Context, key string, load loader, h how, pc *peekCall, perr error) (answer, *peekCopy) {
	a, keep, done, perr := c.afterPeek(ctx, key, pc, perr, h)
	if done {
		return a, keep
	}
	f, joined, ok := c.join(ctx, key, load, h, perr, nil)
	if !ok {
		return answer{err: ErrClosed}, nil
	}
	var at int64 // 0: f is the call's own
	if joined {
		at = c.joined()
	}
	return c.awaitFor(ctx, f, load, joined, at), nil
}

// peekFor is the peek of a Fetch of key with load and h. answered is true
// when a is the call's answer: from the flight the peek handed it over to
// (handOff), or rescued before its deadline (rescue.go). err is the peek's.
func (c *Cache) peekFor(ctx context.Context, key string, load loader, h how) (pc *peekCall, a answer, answered bool, err error) {
	first := ctx
	if h.skip != 0 {
		first = nil // it needs a flight that skips the entry: never handed over
	}
	pc, o, joined := c.startPeek(key, first, load, h)
	if o != nil {
		o.ReadBy, _ = ctx.Deadline()
		c.sendPeek(o)
	}
	select {
	case <-pc.done:
		return c.peeked(ctx, pc, joined, o == nil)
	default:
	}
	r := c.planRescue(ctx, key)
	fire, stop := r.Timer()
	defer func() { stop() }()
	opened := c.openDone(key, &r)
	for {
		select {
		case <-pc.done:
			return c.peeked(ctx, pc, joined, o == nil)
		case <-ctx.Done():
			if f, handed := flights.Leave(&pc.handed, &c.peeks, pc, key, o != nil); handed {
				return nil, c.await(ctx, f, o == nil, joined), true, nil
			}
			return nil, answer{}, false, ctx.Err()
		case <-opened:
			opened = nil
			if c.rescueDue(pc, &r, o != nil) { // a fail-open load of the key ended, and Redis is still silent: take its answer now
				return nil, c.rescued(ctx, key, load), true, nil
			}
		case <-fire:
			if c.rescueDue(pc, &r, o != nil) {
				return nil, c.rescued(ctx, key, load), true, nil
			}
			fire, stop = r.Again() // Redis answered something: slow, not down, unless silent from now
		}
	}
}

// peeked is pc's outcome for a caller that joined it at joined (shared:
// not its sender): the flight's answer if pc handed it over (handOff).
func (c *Cache) peeked(ctx context.Context, pc *peekCall, joined int64, shared bool) (*peekCall, answer, bool, error) {
	if f, other := handedTo(pc); f != nil {
		return nil, c.await(ctx, f, shared && other, joined), true, nil
	}
	return pc.forJoiner(joined), answer{}, false, pc.err
}

// rescueDue reports whether a caller of pc (first: its sender) is rescued
// now, having left pc or the flight pc handed it to (then, only while its
// fetch.lua is out, nothing heard from the node since it was sent).
func (c *Cache) rescueDue(pc *peekCall, r *rescue, first bool) bool {
	if f := pc.handed.To(); f == nil && !c.due(r) || f != nil && (!f.asking.Load() || c.store.pipe.HeardSince(r.Name, r.From(f.asked.Load()))) {
		return false
	}
	if f, handed := flights.Leave(&pc.handed, &c.peeks, pc, pc.key, first); handed {
		c.flights.Leave(f.key, f, f.stop) // handed over, maybe just now
	}
	return true
}

// openDone returns the channel closed when the key's fail-open load under
// way ends, for a caller with rescue r (nil without one, or without such
// a load): a caller that Redis leaves silent takes that load's answer as
// soon as it is there, not at its own rescue's time, which a process
// starved of CPU may see late.
func (c *Cache) openDone(key string, r *rescue) <-chan struct{} {
	if r.At.IsZero() {
		return nil
	}
	if o := c.opens.Get(key); o != nil && !o.Ended() {
		return o.Done()
	}
	return nil
}

// awaitFor is await for a Fetch with load, which may be rescued before its
// deadline (rescue.go) while the flight waits for Redis's answer.
func (c *Cache) awaitFor(ctx context.Context, f *flight, load loader, joined bool, at int64) answer {
	select {
	case <-f.done:
		return c.await(ctx, f, joined, at)
	default:
	}
	r := c.planRescue(ctx, f.key)
	if r.At.IsZero() {
		return c.await(ctx, f, joined, at)
	}
	fire, stop := r.Timer()
	defer func() { stop() }()
	opened := c.openDone(f.key, &r)
	for {
		select {
		case <-f.done:
			return c.await(ctx, f, joined, at)
		case <-ctx.Done():
			return c.await(ctx, f, joined, at) // as await does: answered at the same moment, or the context's error
		case <-opened:
			opened = nil
			if f.asking.Load() && c.due(&r) { // as peekFor
				c.flights.Leave(f.key, f, f.stop)
				return c.rescued(ctx, f.key, load)
			}
		case <-fire:
			if f.asking.Load() && c.due(&r) {
				c.flights.Leave(f.key, f, f.stop)
				return c.rescued(ctx, f.key, load)
			}
			fire, stop = r.Again()
		}
	}
}

// afterPeek answers a call from its peek (pc, or the peek's error perr)
// when it can: done, with keep as for fromRedis. Otherwise the call goes on to
// a flight, and failed is the peek's error when Redis failed (the flight
// then fails open at once), nil when fetch.lua is to decide.
func (c *Cache) afterPeek(ctx context.Context, key string, pc *peekCall, perr error, h how) (a answer, keep *peekCopy, done bool, failed error) {
	switch {
	case perr == nil:
		c.firstUse()
		if out, ok := c.servable(&pc.r, &h); ok {
			val, err := entryAnswer(pc.r.payload, pc.r.Flags.Kind)
			a := answer{val: val, err: err, out: out, soft: pc.r.Soft, dec: &pc.decoded}
			if c.near != nil && (out == outHit || out == outNegative) {
				return a, &peekCopy{reply: pc.r, seq: pc.seq}, true, nil
			}
			return a, nil, true, nil
		}
		return answer{}, nil, false, nil
	case ctx.Err() != nil:
		return answer{err: ctx.Err()}, nil, true, nil
	case c.ctx.Err() != nil:
		return answer{err: ErrClosed}, nil, true, nil
	case !redisFailed(perr):
		c.firstUse() // Redis answered: not Redis failing, fetch.lua decides
		return answer{}, nil, false, nil
	}
	if a, ok := c.failSafe(key); ok {
		c.stats.RedisErrors.Add(1)
		return a, nil, true, nil
	}
	return answer{}, nil, false, perr
}
