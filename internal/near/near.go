// Package near is corral's memory of Redis's entries inside one process:
// the near cache, an in-process cache (L1) in front of Redis kept coherent
// by Redis's server-assisted client-side caching (tracking.go); the values
// kept for fail-safe use while Redis cannot be used (held.go); and the
// values loaded over entries a newer release wrote (newer.go).
//
// It knows values, their expiries and their invalidations, on a clock of
// its own (Clock). It knows nothing of leases, flights or how the values
// were loaded: the cache that fills it decides what to keep, and when a
// copy may answer a call.
package near

import (
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
)

// Config configures a near cache.
type Config struct {
	// Size is the most copies held (a key decoded into two types is two).
	Size int
	// MaxBytes bounds the total size, in bytes, of the copies held (the
	// stored bytes each was read as); 0 for no byte limit.
	MaxBytes int64
	// TTL is the longest a copy is a hit without Redis confirming it.
	TTL time.Duration
	// SafeTTL is how long a copy is kept for fail-safe use, while Redis
	// cannot be used; 0 when fail-safe is off.
	SafeTTL time.Duration

	// Client is the Redis client whose invalidations keep the copies
	// coherent (tracking.go); with none, no copy is ever a hit.
	Client redis.UniversalClient
	// Prefix starts the names of the entries to track ("P:e:"): a key's
	// entry is named Prefix{T}:K.
	Prefix string
	// StreamFailed is told why a node's invalidation stream broke, once
	// until the stream is back up. It may be nil.
	StreamFailed func(node string, err error)
}

// Key names a copy: a key, and the type it was decoded into (nil for the
// stored bytes).
type Key struct {
	Key  string
	Type reflect.Type
}

// Entry is a copy held in memory.
type Entry struct {
	Val  any   // []byte, or a decoded value
	Err  error // the not-found error, for a negative entry
	Soft int64 // the soft expiry, on Clock
	Took float64
	Size uint32 // bytes, as stored
	// Born and Tags are the entry's (internal/wire's FieldBorn and
	// FieldTags), for the Cache to judge the copy against its group
	// invalidations; 0 and "" for a fail-open copy.
	Born int64
	Tags string
	// Checked is the last tag invalidation's epoch (internal/epochs) when
	// the copy's tags were last found valid, so that a later check under
	// the same epoch need not look them up again.
	Checked atomic.Int64

	life  time.Duration // how long otter keeps it: the longer of TTL and SafeTTL, until the soft expiry
	fresh int64         // served as a hit until this (Clock): TTL after it was stored; 0 for a fail-open copy, never a hit
	safe  int64         // served while Redis cannot be used until this (Clock), within Soft; 0 for never
	epoch uint64        // the invalidation stream's epoch when it was read (Cache.epoch)
}

// base is the origin of Clock.
var base = time.Now()

// Clock is monotonic time in ns, cheap to read and compare.
func Clock() int64 { return int64(time.Since(base)) }

// At is t on Clock.
func At(t time.Time) int64 { return int64(t.Sub(base)) }

// Until is when, on Clock, an entry whose soft expiry is soft goes stale,
// read when the server's clock said now (both ms) by a request sent at sent
// (Clock): the server's time left, counted from before the request went,
// so never later than on the server (less 1 ms: now is the server's
// millisecond, rounded down, and the time may have been up to 1 ms later).
// It saturates, at half the int64
// range either way, so that a time it returns can still be subtracted
// from: an expiry more than 70 years away (a foreign entry's, MaxTTL's) is
// never, one as far behind long past.
func Until(sent, soft, now int64) int64 {
	const limit = math.MaxInt64 / 4 / int64(time.Millisecond) // ms, about 73 years
	switch {
	case soft > now+limit:
		return math.MaxInt64 / 2
	case soft < now-limit:
		return -math.MaxInt64 / 2
	}
	return sent + (soft-now-1)*int64(time.Millisecond)
}

// Stamp sets t to Clock's time now, unless a later one is there already.
func Stamp(t *atomic.Int64) {
	for now := Clock(); ; {
		if last := t.Load(); last >= now || t.CompareAndSwap(last, now) {
			return
		}
	}
}

// Cache holds copies of entries in memory (github.com/maypok86/otter).
// A copy is served as a hit only while the invalidation stream is up
// (healthy), has been up since before the copy was read (its epoch), for at
// most TTL, and before its soft expiry; it is stored only if no
// invalidation arrived while it was read (seq), so a copy read before a
// write can never outlive that write's invalidation. A copy is kept longer,
// up to SafeTTL, for calls whose own Redis attempt failed (FailSafe): a
// stream that breaks makes copies unfit to be hits, but does not throw
// them away, since while Redis is unreachable they are the only ones left.
type Cache struct {
	c         *otter.Cache[Key, *Entry]
	ttl       time.Duration
	safeTTL   time.Duration
	seq       atomic.Uint64 // bumped by every invalidation and purge
	epoch     atomic.Uint64 // bumped whenever the stream goes up or down
	healthy   atomic.Bool   // the invalidation stream is up
	closeOnce sync.Once     // Close runs once
	tracker   *tracker      // nil without a Client

	typesMu sync.Mutex                     // serialises additions to types
	types   atomic.Pointer[[]reflect.Type] // the types copies were decoded into
}

// Snap is what the near cache was before a read of Redis whose result may
// be stored.
type Snap struct {
	seq, epoch uint64
}

// New returns a near cache, keeping its copies coherent through
// o.Client's invalidations (when set) until Close.
func New(o Config) (*Cache, error) {
	oo := &otter.Options[Key, *Entry]{
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[Key, *Entry]) time.Duration {
			return e.Value.life + coarseResolution // only memory: the hit's expiry is checked on Clock (coarse.go)
		}),
	}
	if o.MaxBytes > 0 {
		// Both bounds with one weight: each copy weighs at least
		// MaxBytes/Size, so at most Size of them fit.
		floor := uint32(max(o.MaxBytes/int64(o.Size), 1))
		oo.MaximumWeight = uint64(o.MaxBytes)
		oo.Weigher = func(_ Key, e *Entry) uint32 { return max(e.Size, floor) }
	} else {
		oo.MaximumSize = o.Size
	}
	oo.Clock = acquireCoarse()
	c, err := otter.New(oo)
	if err != nil {
		releaseCoarse()
		return nil, err
	}
	n := &Cache{c: c, ttl: o.TTL, safeTTL: o.SafeTTL}
	n.types.Store(&[]reflect.Type{nil})
	if o.Client != nil {
		n.tracker = track(n, o)
	}
	return n, nil
}

// Lookup returns k's copy, while the stream is healthy, has been since
// the copy was read, and before the copy's fresh end (nil otherwise), and
// the time it was read at.
func (n *Cache) Lookup(k Key) (*Entry, int64) {
	if !n.healthy.Load() {
		return nil, 0
	}
	e, ok := n.c.GetIfPresent(k)
	if !ok {
		return nil, 0
	}
	now := Clock()
	if now >= e.fresh || e.epoch != n.epoch.Load() {
		return nil, 0
	}
	return e, now
}

// Early reports whether XFetch, with the draw x, picks e for an early
// refresh at now: only Redis can run one, so e is then no hit.
func Early(e *Entry, x float64, now int64) bool {
	return x > 0 && e.Took > 0 && now+int64(e.Took*x*float64(time.Millisecond)) >= e.Soft
}

// Snapshot is taken before a read of Redis whose result may be stored.
func (n *Cache) Snapshot() Snap {
	return Snap{seq: n.seq.Load(), epoch: n.epoch.Load()}
}

// Put stores a copy read from Redis, unless an invalidation (or a purge)
// came since snap was taken before the read: the copy may then be older
// than what Redis holds. A copy read while the stream was down, or whose
// stream changed since, is stored for fail-safe use only (its epoch).
func (n *Cache) Put(k Key, e *Entry, snap Snap) {
	now := Clock()
	left := time.Duration(e.Soft - now)
	e.fresh = now + int64(min(n.ttl, left))
	if n.safeTTL > 0 {
		e.safe = now + int64(min(n.safeTTL, left))
	}
	e.epoch = snap.epoch
	n.set(k, e, snap.seq, max(n.ttl, n.safeTTL), left)
}

// PutFailOpen stores a copy of what a fail-open load returned (its Soft
// expiry on Clock): never a hit, served only while Redis cannot be used,
// up to SafeTTL. snap was taken before the load.
func (n *Cache) PutFailOpen(k Key, e *Entry, snap Snap) {
	if n.safeTTL <= 0 {
		return
	}
	left := time.Duration(e.Soft - Clock())
	e.safe = Clock() + int64(min(n.safeTTL, left))
	n.set(k, e, snap.seq, n.safeTTL, left)
}

// set stores e for keep at most, until left has passed, unless an
// invalidation came since seq.
func (n *Cache) set(k Key, e *Entry, seq uint64, keep, left time.Duration) {
	if n.seq.Load() != seq {
		return
	}
	e.life = min(keep, left)
	if e.life <= 0 {
		return
	}
	n.c.Set(k, e)
	if n.seq.Load() != seq {
		n.c.Invalidate(k) // an invalidation came between the check and the Set
	}
}

// FailSafe returns a copy of key that may be served while Redis cannot be
// used, of any type it was kept as (the bytes first), and its type.
func (n *Cache) FailSafe(key string) (*Entry, reflect.Type, bool) {
	now := Clock()
	for _, t := range *n.types.Load() {
		if e, ok := n.c.GetIfPresent(Key{key, t}); ok && now < e.safe {
			return e, t, true
		}
	}
	return nil, nil, false
}

// FailOpenCopy returns the copy of key's bytes that a fail-open load made
// (PutFailOpen), while it may be served; not a copy read from Redis.
func (n *Cache) FailOpenCopy(key string) (*Entry, bool) {
	e, ok := n.c.GetIfPresent(Key{Key: key})
	if !ok || e.fresh != 0 || Clock() >= e.safe {
		return nil, false
	}
	return e, true
}

// streamChanged records that the invalidation stream went up or down:
// copies read before are no longer hits (one may have missed an
// invalidation), though they stay for fail-safe use.
func (n *Cache) streamChanged() {
	n.seq.Add(1)
	n.epoch.Add(1)
}

// Use records that copies of type t are kept, so that invalidations reach
// them.
func (n *Cache) Use(t reflect.Type) {
	for _, have := range *n.types.Load() {
		if have == t {
			return
		}
	}
	n.typesMu.Lock()
	defer n.typesMu.Unlock()
	old := *n.types.Load()
	for _, have := range old {
		if have == t {
			return
		}
	}
	grown := append(append([]reflect.Type(nil), old...), t)
	n.types.Store(&grown)
}

// Invalidate drops every copy of key.
func (n *Cache) Invalidate(key string) {
	n.seq.Add(1)
	for _, t := range *n.types.Load() {
		n.c.Invalidate(Key{key, t})
	}
}

// ForgetFailOpen drops the copies fail-open loads made (PutFailOpen),
// and keeps a load under way from storing its own: a group invalidation
// (a Clear, a tag) may concern any of them.
func (n *Cache) ForgetFailOpen() {
	n.seq.Add(1)
	for k, e := range n.c.All() {
		if e.fresh == 0 {
			n.c.Invalidate(k)
		}
	}
}

// purge drops every copy.
func (n *Cache) purge() {
	n.seq.Add(1)
	n.c.InvalidateAll()
}

// Close stops the invalidation streams, waiting for them until deadline
// (a stream blocked on a stalled Redis ends on its own once its read
// returns), drops every copy, stops otter's goroutines and lets the coarse
// clock go. Calls after the first do nothing.
func (n *Cache) Close(deadline time.Time) {
	n.closeOnce.Do(func() {
		n.healthy.Store(false)
		if n.tracker != nil {
			n.tracker.close(deadline)
		}
		n.c.InvalidateAll()
		n.c.StopAllGoroutines()
		releaseCoarse()
	})
}
