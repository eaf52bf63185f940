package corral

import (
	"context"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/near"
)

// Memory is the last line. While this process cannot use Redis for a call
// (Redis refuses connections, is silent past RedisTimeout, refuses the
// client's AUTH, or the node's breaker is open), a value the process holds
// is served instead of calling the origin (fail-safe):
//
//   - With the near cache, its copies: kept past NearCacheOptions.TTL, up
//     to FailSafeOptions.TTL after Redis last confirmed them (never past
//     their soft expiry), and no longer thrown away when the invalidation
//     stream drops, but served so only to a call whose own Redis attempt
//     failed. While Redis answers, coherence comes first: a copy is a hit
//     only within NearCacheOptions.TTL and while the stream is up.
//   - What a fail-open load returned: with the near cache, as a copy served
//     so for FailSafeOptions.TTL; without it, in a small memory of its own
//     (held), for FailSafeOptions.Throttle. Either way, however many callers
//     ask, a key costs at most one origin load per process per Throttle
//     (per TTL with the near cache) while Redis stays away.
//
// Fail-open loads of a key in this process are one at a time (opens): a
// flight's and those of callers whose deadline could not wait for Redis
// (rescue.go) share one.

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

// withDefaults fills in o's defaults, or returns an error for a negative
// field.
func (o FailSafeOptions) withDefaults() (FailSafeOptions, error) {
	if o.TTL < 0 || o.Throttle < 0 || o.Size < 0 || o.MaxBytes < 0 {
		return o, invalid("FailSafe has a negative TTL, Throttle, Size or MaxBytes (%+v)", o)
	}
	o.TTL = cmpOr(o.TTL, DefaultFailSafeTTL)
	o.Throttle = cmpOr(o.Throttle, DefaultFailSafeThrottle)
	o.Size = cmpOr(o.Size, DefaultFailSafeSize)
	o.MaxBytes = cmpOr(o.MaxBytes, DefaultFailSafeMaxBytes)
	return o, nil
}

// cmpOr returns v, or def when v is zero.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
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
	if c.near != nil {
		if !copies {
			return c.heldOpen(key)
		}
		e, typ, ok := c.near.FailSafe(key)
		if !ok {
			return answer{}, false
		}
		if e.Err != nil {
			return answer{err: e.Err, out: outFailSafe}, true
		}
		if typ == nil {
			val, _ := e.Val.([]byte)
			return answer{val: val, out: outFailSafe}, true
		}
		b, err := c.opts.Codec.Marshal(e.Val)
		if err != nil {
			return answer{}, false
		}
		return answer{val: b, out: outFailSafe}, true
	}
	h, ok := c.held.Get(key)
	if !ok {
		return answer{}, false
	}
	return answer{val: h.Val, err: h.Err, out: outFailSafe}, true
}

// heldOpen answers from the near cache's copy of a fail-open load's result
// only, not from a copy read from Redis.
func (c *Cache) heldOpen(key string) (answer, bool) {
	e, ok := c.near.FailOpenCopy(key)
	if !ok {
		return answer{}, false
	}
	val, _ := e.Val.([]byte)
	return answer{val: val, err: e.Err, out: outFailSafe}, true
}

// openLoads are the fail-open loads of a process, one per key at most:
// under way, or ended less than RedisTimeout ago (runOpen).
type openLoads struct {
	mu sync.Mutex           // guards m
	m  map[string]*openLoad // the fail-open load of each key
}

// get returns key's fail-open load, or nil.
func (g *openLoads) get(key string) *openLoad {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key]
}

// drop removes key's load o (any, when o is nil).
func (g *openLoads) drop(key string, o *openLoad) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if o == nil || g.m[key] == o {
		delete(g.m, key)
	}
}

// openLoad is a fail-open load of a key under way (Cache.opens).
type openLoad struct {
	done  chan struct{} // closed once the fields below are set
	val   []byte
	took  time.Duration
	fr    freshness
	err   error
	asked bool // the loader called IsFailOpen: its result may not be a leased load's
}

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
		val, took, fr, err = c.joinOpen(ctx, o)
		return val, took, fr, false, err
	}
	c.runOpen(ctx, key, l, o)
	return o.val, o.took, o.fr, false, o.err
}

// openLoadOf returns key's fail-open load: the one under way (mine false),
// or a new one for the caller to run (mine true, with runOpen); or, held,
// the answer from memory a (see loadOpen).
func (c *Cache) openLoadOf(key string, copies bool) (o *openLoad, mine bool, a answer, held bool) {
	g := &c.opens
	g.mu.Lock()
	defer g.mu.Unlock()
	if o := g.m[key]; o != nil && !o.ended() {
		return o, false, answer{}, false
	}
	if a, ok := c.failSafeFrom(key, copies); ok {
		return nil, false, a, true
	}
	o = &openLoad{done: make(chan struct{})}
	g.m[key] = o
	return o, true, answer{}, false
}

// joinOpen waits for o, another caller's fail-open load, or for ctx.
func (c *Cache) joinOpen(ctx context.Context, o *openLoad) (val []byte, took time.Duration, fr freshness, err error) {
	select {
	case <-o.done:
		return o.val, o.took, o.fr, o.err
	case <-ctx.Done():
		return nil, 0, freshness{}, c.closedErr(ctx.Err())
	}
}

// runOpen runs o, key's fail-open load with l, that openLoadOf gave the
// caller, keeps its result, and answers its joiners.
func (c *Cache) runOpen(ctx context.Context, key string, l loader, o *openLoad) {
	var snap near.Snap
	var seq uint64
	switch {
	case c.near != nil:
		snap = c.near.Snapshot()
	case c.held != nil:
		seq = c.held.Seq()
	}
	lctx, mark := failingOpen(ctx)
	o.val, o.took, o.fr, o.err = c.runLoad(lctx, key, l)
	o.asked = mark.asked.Load()
	c.hold(key, o, snap, seq)
	close(o.done)
	// It stays in opens for RedisTimeout, ended, for a leased load of the
	// key to take its result (leasedLoad) rather than ask the origin again
	// as Redis comes back; a Delete or Set of the key (forget) drops it.
	time.AfterFunc(c.opts.RedisTimeout, func() { c.opens.drop(key, o) })
}

// ended reports whether o has its result.
func (o *openLoad) ended() bool { return isClosed(o.done) }

// hold keeps what the fail-open load o returned for fail-safe use (see the
// top of this file), unless an invalidation of the key came since snap (the
// near cache's) or held (the held values') were taken, before the load: a
// Delete that returned during it must not be undone by it.
func (c *Cache) hold(key string, o *openLoad, snap near.Snap, held uint64) {
	if c.opts.DisableFailSafe || !o.fr.stored() && o.err == nil {
		return
	}
	soft, err := o.fr.soft, o.err
	switch {
	case err == nil:
		if len(o.val) > c.opts.MaxValueBytes {
			return
		}
		if o.fr.exact {
			soft -= time.Since(o.fr.from)
		}
	case isNotFound(err):
		soft, err = c.opts.NegativeTTL, ErrNotFound
	default:
		return // a failure is not kept: the next caller tries again
	}
	now, took := near.Clock(), float64(o.took.Microseconds())/1000
	if c.near != nil {
		c.near.PutFailOpen(near.Key{Key: key}, &near.Entry{Val: o.val, Err: err, Soft: now + int64(soft),
			Took: took, Size: uint32(min(len(o.val), 1<<31))}, snap)
		return
	}
	c.held.Put(key, &near.Value{Val: o.val, Err: err, Until: now + int64(min(c.opts.FailSafe.Throttle, soft)), Took: took}, held)
}

// forget drops what this process holds of key for fail-safe use, and lets
// no fail-open load under way keep its result: key was just invalidated
// (Delete, Set, or one queued for Redis).
func (c *Cache) forget(key string) {
	c.opens.drop(key, nil)
	if c.held != nil {
		c.held.Forget(key)
	}
}
