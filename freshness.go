package corral

import (
	"math"
	"time"

	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/wire"
)

// Freshness: how long what a load returned lives (a soft TTL, spread by
// ±Jitter, then a stale window: RFC 5861's stale-while-revalidate), and when
// it is refreshed early instead (XFetch: Vattani, Chierichetti and
// Lowenstein, VLDB 2015), decided alike on every path that reads an entry
// (fetch.lua, servable, nearGet): docs/design.md, section 3.4.

// freshness is how long a loaded value lives.
type freshness struct {
	soft  time.Duration // the soft TTL; <= 0: the value is not stored
	stale time.Duration // the stale window after it; 0 for none
	exact bool          // soft is the loader's own (an Entry's): Jitter does not spread it
	from  time.Time     // when exact: when the loader returned, from which soft counts
	tags  string        // the value's tags (internal/epochs' encoding), "" for none
}

// stored reports whether a value with this freshness is stored at all.
func (fr freshness) stored() bool { return fr.soft > 0 }

// until is when a value loaded with fr, whose loader returned at returned
// (near.Clock), goes stale, here, for a soft TTL soft (fr's, or the
// entry's as written): counted from when an Entry's loader returned, or
// else from returned (the server counts from the commit, later). 0 when
// the value is not stored.
func (fr freshness) until(returned int64, soft time.Duration) int64 {
	switch {
	case !fr.stored():
		return 0
	case fr.exact:
		return near.At(fr.from) + int64(soft)
	}
	return returned + int64(soft)
}

// freshness is the freshness of a value Fetch, Set or FetchMany writes for
// ttl: spread by Jitter, with Options.StaleTTL's window.
func (c *Cache) freshness(ttl time.Duration) freshness {
	return freshness{soft: ttl, stale: max(c.opts.StaleTTL, 0)}
}

// entryFreshness is the freshness of e, as Entry documents it.
func (c *Cache) entryFreshness(e Entry) freshness {
	fr := freshness{soft: e.TTL, stale: e.StaleTTL, exact: true, from: time.Now()}
	switch {
	case e.StaleTTL == 0:
		fr.stale = max(c.opts.StaleTTL, 0)
	case e.StaleTTL < 0:
		fr.stale = 0
	}
	return fr
}

// entry builds the write of an entry: its soft TTL (fr's, NegativeTTL for
// a negative entry, ErrorTTL for a cached failure) spread by ±Jitter unless
// the loader set it (fr.exact), its hard TTL fr.stale longer (for values
// only: a cached "not found" or failure has no stale window). An entry
// with a stale window is written without its load's duration, so that
// early refresh (XFetch), which needs it, never picks it: it is refreshed
// once stale instead, wherever it is read (the peek, fetch.lua, the near
// cache).
func (c *Cache) entry(value []byte, kind wire.Kind, fr freshness, took time.Duration) entryWrite {
	ttl, exact := fr.soft, fr.exact
	switch kind {
	case wire.NotFound:
		ttl, exact = c.opts.NegativeTTL, false
	case wire.Failure:
		ttl, exact = c.opts.ErrorTTL, false
	}
	ttl = min(ttl, MaxTTL)
	if j := c.opts.Jitter; j > 0 && !exact {
		ttl = min(time.Duration(float64(ttl)*(1+j*(2*c.opts.Rand()-1))), MaxTTL)
	}
	w := entryWrite{value: value, kind: kind, soft: max(ttl, time.Millisecond), took: took}
	w.hard = w.soft
	if kind == wire.Value {
		w.hard += min(fr.stale, MaxTTL) // at most 2*MaxTTL: no overflow
		if exact {
			w.expires = fr.from.Add(w.soft)
		}
		w.tags = fr.tags
	}
	if w.hard > w.soft || kind != wire.Value {
		w.took = 0 // refreshed once stale, or (not found, failure) not refreshed early at all
	}
	return w
}

// MaxTTL caps every TTL corral writes (soft TTLs, StaleTTL, NegativeTTL,
// ErrorTTL): longer ones, such as math.MaxInt64 meant as "forever", are
// stored as 100 years.
const MaxTTL = 100 * 365 * 24 * time.Hour

// earlyFactor draws XFetch's x = Beta * -ln(U), U uniform in (0, 1]; 0 when
// early refresh is off, or when a stale window makes it needless.
func (c *Cache) earlyFactor() float64 {
	if !c.earlyRefresh() {
		return 0
	}
	return c.opts.Beta * -math.Log(1-c.opts.Rand())
}

// earlyRefresh reports whether XFetch's early refresh is on: it is off
// when disabled, and with a stale window (stale-while-revalidate refreshes
// instead). An entry with a stale window of its own (FetchEntry) is not
// refreshed early either way: it is written without the load's duration
// XFetch needs (Cache.entry).
func (c *Cache) earlyRefresh() bool {
	return !c.opts.DisableEarlyRefresh && c.opts.StaleTTL <= 0
}

// draw makes the XFetch draw into h.x, unless it was made already.
func (h *how) draw(c *Cache) {
	if !h.drawn {
		h.x, h.drawn = c.earlyFactor(), true
	}
}

// entryWrite is one entry to store: a load's result or a Set.
type entryWrite struct {
	value []byte
	kind  wire.Kind
	soft  time.Duration // soft TTL
	hard  time.Duration // hard TTL: soft + stale window
	took  time.Duration // the load's duration, for XFetch
	// expires, for a soft TTL the loader set (FetchEntry), is when it ends
	// on the local clock (counted from when the loader returned); zero
	// otherwise. A write sent later, a commit sent again, is stored for
	// what remains of it (ttls), so it never outlives it.
	expires time.Time
	born    int64  // when its load began on the records' clock (Cache.bornAt); 0: the commit's own clock
	tags    string // its tags (a value's only)
}

// ttls returns w's soft and hard TTLs for a write sent now.
func (w entryWrite) ttls() (soft, hard time.Duration) {
	if w.expires.IsZero() {
		return w.soft, w.hard
	}
	soft = max(time.Until(w.expires).Truncate(time.Millisecond), time.Millisecond) // not rounded up, as ms would
	return soft, soft + w.hard - w.soft
}
