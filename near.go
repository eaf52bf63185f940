package corral

import (
	"reflect"
	"time"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/near"
	"github.com/redis/go-redis/v9"
)

// The near cache is in internal/near; this file holds the Cache's use of
// it: when a copy answers a call (XFetch may pick it for an early refresh),
// and what a call keeps of its answer.

// NearCacheOptions configures the near cache: an in-process cache (L1) in
// front of Redis, kept coherent across the fleet by Redis's server-assisted
// client-side caching (see the package doc). Size 0 means off.
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

// newNear returns the near cache o asks for, kept coherent through rdb's
// invalidations.
func newNear(o Options, rdb redis.UniversalClient) (*near.Cache, error) {
	safeTTL := o.FailSafe.TTL
	if o.DisableFailSafe {
		safeTTL = 0
	}
	return near.New(near.Config{
		Size: o.NearCache.Size, MaxBytes: o.NearCache.MaxBytes, TTL: o.NearCache.TTL, SafeTTL: safeTTL,
		Client: rdb, Prefix: o.Prefix + ":e:",
		StreamFailed: func(node string, err error) {
			o.Logger.Warn("corral: the near cache's invalidation stream failed; copies are not hits until it is back (they answer only calls Redis fails)", "node", node, errAttr(denied(err)))
		},
	})
}

// maxDraw bounds the draw -ln(U) that nearGet considers without making it:
// it exceeds 40 with a chance of e^-40, about 4e-18.
const maxDraw = 40

// nearGet returns k's copy in the near cache, unless XFetch, with h's draw,
// picks it for an early refresh (which only Redis can run); but it draws
// (h.draw) only for a copy close enough to its soft expiry for the draw to
// matter. A copy further from it than Beta × 40 × its load's duration
// stays a hit whatever the draw (but for a chance of e^-40), so most near
// hits make no draw: its logarithm and random number were about a third of
// a near hit's time.
func (c *Cache) nearGet(k near.Key, h *how) (*near.Entry, bool) {
	e, now := c.near.Lookup(k)
	if e == nil {
		return nil, false
	}
	if c.groups.CheckAt(e.Born, e.Tags, now, &e.Checked) != epochs.Valid {
		return nil, false // invalidated (groups.go), or records to read first: Redis decides
	}
	if c.earlyRefresh() && near.Early(e, c.opts.Beta*maxDraw, now) {
		h.draw(c)
		if near.Early(e, h.x, now) {
			return nil, false
		}
	}
	return e, true
}

// keepNear keeps, as the near cache's copy of key decoded as typ (nil for
// the bytes), the answer (val, err) of size bytes that a peek read (keep);
// keep is nil when the near cache may not keep it.
func (c *Cache) keepNear(key string, typ reflect.Type, keep *peekCopy, val any, err error, size int) {
	if keep == nil || err != nil && !isNotFound(err) {
		return
	}
	if typ != nil {
		c.near.Use(typ)
	}
	c.near.Put(near.Key{Key: key, Type: typ}, keep.entry(val, err, size), keep.seq)
}

// During a rolling deploy that raised Options.CodecVersion, an instance of
// the older release finds entries written by the newer one (fetch.lua's
// NEWER reply). It cannot decode them, and must not overwrite them, so it
// loads without storing, and keeps what it loaded while that entry stays
// the same (internal/near's Newer).

// overNewer answers f, whose entry a newer release wrote (soft expiry soft):
// from this process's copy for that entry, or by loading without storing.
func (c *Cache) overNewer(f *flight, soft int64) answer {
	if val, ok := c.newer.Get(f.key, soft); ok {
		return answer{val: val, out: outHit}
	}
	val, _, fr, err := c.runLoader(f)
	if err == nil && fr.stored() {
		c.newer.Set(f.key, soft, val)
	}
	return answer{val: val, err: err, out: outMiss}
}
