package corral

import (
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// NearCacheOptions configures the near cache: an in-process cache (L1) in
// front of Redis, kept coherent across the fleet by Redis's server-assisted
// client-side caching (see tracking.go). Size 0 means off.
type NearCacheOptions struct {
	// Size is the most entries held (a Fetch[T] of a key holds one per
	// type T). 0 turns the near cache off.
	Size int

	// MaxBytes bounds the total size, in bytes, of the values held (the
	// stored bytes a value was read as). 0 means no byte limit.
	MaxBytes int64

	// TTL is the longest a copy is served from memory as a hit without
	// Redis confirming it, even if an invalidation were lost. Default 1s.
	// While Redis cannot be used, copies are served longer, up to
	// Options.FailSafe.TTL (see Options.FailSafe): they are kept that
	// long, within the entry's soft expiry and the bounds above.
	TTL time.Duration
}

// DefaultNearCacheTTL is NearCacheOptions.TTL's default.
const DefaultNearCacheTTL = time.Second

// nearKey names a copy: a key, and the type it was decoded into (nil for
// the bytes of Cache.Fetch).
type nearKey struct {
	key string
	typ reflect.Type
}

// nearEntry is a copy held in memory.
type nearEntry struct {
	val  any   // []byte, or a decoded T
	err  error // ErrNotFound for a negative entry
	soft int64 // the soft expiry, on nearClock
	took float64
	life time.Duration // how long otter keeps it: the longer of TTL and the fail-safe TTL, until the soft expiry
	size uint32

	fresh int64  // served as a hit until this (nearClock): TTL after it was stored; 0 for a fail-open copy, never a hit
	safe  int64  // served while Redis cannot be used until this (nearClock), within soft; 0 for never
	epoch uint64 // the invalidation stream's epoch when it was read (nearCache.epoch)
}

// nearBase is the origin of nearClock.
var nearBase = time.Now()

// nearClock is monotonic time in ns, cheap to read and compare.
func nearClock() int64 { return int64(time.Since(nearBase)) }

// nearCache holds copies of entries in memory (github.com/maypok86/otter).
// A copy is served as a hit only while the invalidation stream is up
// (healthy), has been up since before the copy was read (its epoch), for at
// most TTL, and before its soft expiry; it is stored only if no
// invalidation arrived while it was read (seq), so a copy read before a
// write can never outlive that write's invalidation. A copy is kept longer,
// up to the fail-safe TTL, for calls whose own Redis attempt failed
// (failSafe): a stream that breaks makes copies unfit to be hits, but does
// not throw them away, since while Redis is unreachable they are the only
// ones left.
type nearCache struct {
	c       *otter.Cache[nearKey, *nearEntry]
	ttl     time.Duration
	safeTTL time.Duration // Options.FailSafe.TTL; 0 when fail-safe is off
	seq     atomic.Uint64 // bumped by every invalidation and purge
	epoch   atomic.Uint64 // bumped whenever the stream goes up or down
	healthy atomic.Bool   // the invalidation stream is up

	typesMu sync.Mutex                     // serialises additions to types
	types   atomic.Pointer[[]reflect.Type] // the types copies were decoded into
}

// nearSnap is what the near cache was before a read of Redis whose result
// may be stored.
type nearSnap struct {
	seq, epoch uint64
}

func newNearCache(o NearCacheOptions, safeTTL time.Duration) (*nearCache, error) {
	oo := &otter.Options[nearKey, *nearEntry]{
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[nearKey, *nearEntry]) time.Duration {
			return e.Value.life
		}),
	}
	if o.MaxBytes > 0 {
		// Both bounds with one weight: each copy weighs at least
		// MaxBytes/Size, so at most Size of them fit.
		floor := uint32(max(o.MaxBytes/int64(o.Size), 1))
		oo.MaximumWeight = uint64(o.MaxBytes)
		oo.Weigher = func(_ nearKey, e *nearEntry) uint32 { return max(e.size, floor) }
	} else {
		oo.MaximumSize = o.Size
	}
	c, err := otter.New(oo)
	if err != nil {
		return nil, err
	}
	n := &nearCache{c: c, ttl: o.TTL, safeTTL: safeTTL}
	n.types.Store(&[]reflect.Type{nil})
	return n, nil
}

// get returns key's copy when it may be served: the stream is up, the copy
// is before its soft expiry, and XFetch (x, the caller's draw) does not pick
// it for an early refresh, which only Redis can run.
func (n *nearCache) get(k nearKey, x float64) (*nearEntry, bool) {
	e, now := n.lookup(k)
	if e == nil || early(e, x, now) {
		return nil, false
	}
	return e, true
}

// lookup returns k's copy, while the stream is healthy, has been since
// the copy was read, and before the copy's fresh end (nil otherwise), and
// the time it was read at.
func (n *nearCache) lookup(k nearKey) (*nearEntry, int64) {
	if !n.healthy.Load() {
		return nil, 0
	}
	e, ok := n.c.GetIfPresent(k)
	if !ok {
		return nil, 0
	}
	now := nearClock()
	if now >= e.fresh || e.epoch != n.epoch.Load() {
		return nil, 0
	}
	return e, now
}

// early reports whether XFetch, with the draw x, picks e for an early
// refresh at now.
func early(e *nearEntry, x float64, now int64) bool {
	return x > 0 && e.took > 0 && now+int64(e.took*x*float64(time.Millisecond)) >= e.soft
}

// maxDraw bounds the draw -ln(U) that nearGet considers without making it:
// it exceeds 40 with a chance of e^-40, about 4e-18.
const maxDraw = 40

// nearGet returns k's copy in the near cache, unless XFetch picks it for an
// early refresh, as near.get does with h's draw; but it draws (h.draw) only
// for a copy close enough to its soft expiry for the draw to matter. A copy
// further from it than Beta × 40 × its load's duration stays a hit whatever
// the draw (but for a chance of e^-40), so most near hits make no draw: its
// logarithm and random number were about a third of a near hit's time.
func (c *Cache) nearGet(k nearKey, h *how) (*nearEntry, bool) {
	e, now := c.near.lookup(k)
	if e == nil {
		return nil, false
	}
	if c.earlyRefresh() && early(e, c.opts.Beta*maxDraw, now) {
		h.draw(c)
		if early(e, h.x, now) {
			return nil, false
		}
	}
	return e, true
}

// snapshot is taken before a read of Redis whose result may be stored.
func (n *nearCache) snapshot() nearSnap {
	return nearSnap{seq: n.seq.Load(), epoch: n.epoch.Load()}
}

// put stores a copy read from Redis, unless an invalidation (or a purge)
// came since snap was taken before the read: the copy may then be older
// than what Redis holds. A copy read while the stream was down, or whose
// stream changed since, is stored for fail-safe use only (its epoch).
func (n *nearCache) put(k nearKey, e *nearEntry, snap nearSnap) {
	now := nearClock()
	left := time.Duration(e.soft - now)
	e.fresh = now + int64(min(n.ttl, left))
	if n.safeTTL > 0 {
		e.safe = now + int64(min(n.safeTTL, left))
	}
	e.epoch = snap.epoch
	n.set(k, e, snap.seq, max(n.ttl, n.safeTTL), left)
}

// putFailOpen stores a copy of what a fail-open load returned (soft: its
// soft expiry on nearClock): never a hit, served only while Redis cannot be
// used, up to the fail-safe TTL. seq is the snapshot's from before the load.
func (n *nearCache) putFailOpen(k nearKey, e *nearEntry, seq uint64) {
	if n.safeTTL <= 0 {
		return
	}
	left := time.Duration(e.soft - nearClock())
	e.safe = nearClock() + int64(min(n.safeTTL, left))
	n.set(k, e, seq, n.safeTTL, left)
}

// set stores e for keep at most, until left has passed, unless an
// invalidation came since seq.
func (n *nearCache) set(k nearKey, e *nearEntry, seq uint64, keep, left time.Duration) {
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

// failSafe returns a copy of key that may be served while Redis cannot be
// used, of any type it was kept as (the bytes first), and its type.
func (n *nearCache) failSafe(key string) (*nearEntry, reflect.Type, bool) {
	now := nearClock()
	for _, t := range *n.types.Load() {
		if e, ok := n.c.GetIfPresent(nearKey{key, t}); ok && now < e.safe {
			return e, t, true
		}
	}
	return nil, nil, false
}

// streamChanged records that the invalidation stream went up or down:
// copies read before are no longer hits (one may have missed an
// invalidation), though they stay for fail-safe use.
func (n *nearCache) streamChanged() {
	n.seq.Add(1)
	n.epoch.Add(1)
}

// use records that copies of type t are kept, so that invalidations reach
// them.
func (n *nearCache) use(t reflect.Type) {
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

// invalidate drops every copy of key.
func (n *nearCache) invalidate(key string) {
	n.seq.Add(1)
	for _, t := range *n.types.Load() {
		n.c.Invalidate(nearKey{key, t})
	}
}

// purge drops every copy.
func (n *nearCache) purge() {
	n.seq.Add(1)
	n.c.InvalidateAll()
}

// close stops otter's goroutines.
func (n *nearCache) close() {
	n.healthy.Store(false)
	n.c.InvalidateAll()
	n.c.StopAllGoroutines()
}
