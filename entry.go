package corral

import (
	"context"
	"time"
)

// An Entry is a value with its own freshness, as the loader of FetchEntry
// returns it: an HTTP response whose Cache-Control says how long it is
// fresh, a token that expires in its own time.
type Entry struct {
	// Value is the value, shared with the callers as Fetch's is.
	Value []byte

	// TTL is the soft TTL, counted from when the loader returned. It is
	// used exactly as given, capped at MaxTTL: Jitter does not spread it,
	// since the loader knows when its value expires. A write that reaches
	// Redis later (the commit waits for a lease renewal under way, or is
	// sent again after Redis failed to answer) stores what remains of it;
	// only the write's last trip to Redis is not counted (the soft expiry
	// is then set on Redis's clock): under a millisecond on a LAN, more
	// when Redis or the process is slow, so leave a margin. TTL <= 0: the
	// value is returned to the callers of this load but not stored
	// (Stats.Uncached counts it); callers waiting in other processes then
	// load it themselves, as for a value over MaxValueBytes.
	TTL time.Duration

	// StaleTTL is the stale-while-revalidate window after TTL (RFC 5861):
	// 0 means Options.StaleTTL, < 0 none, > 0 this window (capped at
	// MaxTTL). An entry with a stale window is served stale while one
	// caller refreshes it in the background, even when Options.StaleTTL is
	// 0, and is never refreshed early (XFetch).
	StaleTTL time.Duration

	// Tags are the groups the value belongs to ("product:42",
	// "tenant:7"): InvalidateTags or ExpireTags of any of them invalidates
	// it. None may be empty or hold a NUL byte (the load fails with
	// ErrInvalidTag); repeats count once.
	Tags []string
}

// FetchEntry is Fetch for a loader that decides how long each value it
// loads lives: its Entry's TTL and StaleTTL replace Fetch's ttl and
// Options.StaleTTL for that value. Everything else is Fetch's: the near
// cache, one load per key across the fleet, waiting, stale-while-revalidate,
// negative caching of ErrNotFound (for NegativeTTL), fail-open, the
// Observer's events and the errors (but ErrInvalidTTL: any TTL is valid).
//
// A value is served fresh, from Redis or the near cache, only until its
// TTL has passed (on the server's clock; a near copy counts down the time
// Redis said was left): a token that expires in expires_in seconds, loaded
// with TTL expires_in seconds less a margin (for the token's way to the
// loader, and the write's to Redis) and StaleTTL -1, is never served after
// it expired. A background refresh of the entry (stale-while-revalidate,
// or XFetch for an entry without a stale window) runs the loader of the
// call that started it, and its Entry sets the freshness of the new value.
//
// Calls of one key in one process share a flight whether they are Fetch or
// FetchEntry calls: a call that joins a flight under way is answered by
// that flight's load (like singleflight). A FetchEntry that joins a
// Fetch's flight gets the value Fetch's loader loaded, stored for Fetch's
// ttl; a Fetch that joins a FetchEntry's flight gets the Entry's value,
// stored for the Entry's TTL (or not at all).
//
// Errors: those of Fetch but ErrInvalidTTL: ErrInvalidKey, ErrNilLoader,
// ErrClosed, ErrNotFound, ErrLoadTimeout, ErrRemoteLoad, *PanicError,
// ErrCachedFailure, ErrPermission, ctx.Err(), the loader's own errors (an
// Entry returned with an error is ignored), and with DisableFailOpen the
// Redis errors.
func (c *Cache) FetchEntry(ctx context.Context, key string, load func(ctx context.Context) (Entry, error)) ([]byte, error) {
	if c.tracer != nil {
		return c.fetchEntryTraced(ctx, key, load)
	}
	w := underWay{noTTL: true}
	if joined, err := c.joinUnderWay(ctx, key, load == nil, &w); err != nil {
		return nil, err // refused (counted)
	} else if !joined {
		return c.serveEntry(ctx, key, load)
	}
	select { // as Fetch: joinwait.go
	case <-w.done:
		w.ended = true
	case <-ctx.Done():
	}
	return c.joinedEntry(ctx, key, load, &w)
}

// fetchEntryTraced is Cache.FetchEntry in a Tracer's scope.
func (c *Cache) fetchEntryTraced(ctx context.Context, key string, load func(ctx context.Context) (Entry, error)) ([]byte, error) {
	return traced(c, ctx, key, func(ctx context.Context) ([]byte, error) {
		if err := c.validate(ctx, key, nil, load == nil); err != nil {
			return nil, c.refused(ctx, key, err)
		}
		return c.serveEntry(ctx, key, load)
	})
}

// serveEntry is serve for Cache.FetchEntry's arguments, validated; not
// inlined, as serveBytes.
//
//go:noinline
func (c *Cache) serveEntry(ctx context.Context, key string, load func(ctx context.Context) (Entry, error)) ([]byte, error) {
	return c.serve(ctx, key, loader{entry: load})
}
