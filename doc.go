// Package corral is a stampede-safe read-through cache over Redis: when a hot
// key is missing or expiring and thousands of callers across many processes
// ask for it at once, the origin (a database query, an HTTP call) sees one
// load, and every caller gets its result about as soon as that load ends.
//
//	// rdb: any redis.UniversalClient, a Cluster or Sentinel one too; with
//	// ContextTimeoutEnabled, hits are read in the calling goroutine.
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	cache, err := corral.New(rdb, nil) // nil: all defaults
//	v, err := cache.Fetch(ctx, "user:42", 10*time.Minute, func(ctx context.Context) ([]byte, error) {
//		return db.LoadUser(ctx, 42)
//	})
//
// New makes a Cache; Options configures it, each field's zero value its
// default. Fetch returns a key's value, calling the loader once across the
// fleet when it is missing or stale (Fetch[T] for a type; FetchMany for
// many keys, one loader call per process; FetchEntry for a loader that sets
// each value's TTL, stale window and tags). Get reads without loading; Set,
// SetEntry, Delete and Expire write one key, InvalidateTags, ExpireTags and
// Clear a group; none lets a load already running store older data. Stats,
// Observer and Health say what a Cache does; Check what it will meet on a
// Redis. Errors are sentinels matched with errors.Is, and say "corral: "
// once.
//
// For a key K under prefix P (Options.Prefix, default "corral"), Redis holds
// the entry P:e:{T}:K (a hash: v or z the payload, s the soft expiry, d the
// last load's duration, f flags, t the commit's lease token, c the codec
// version, b when its load began, g its tags), the lease P:l:{T}:K and the
// notice channel P:n:{T}:K, where T is K's hash tag or a hash of K (one
// Cluster slot per key); and per prefix the records of group invalidations,
// P:c:{P} and P:t:{P}:G, in the prefix's slot.
//
// Most calls are a peek (HMGET, no script) decided on the server's clock,
// or a near-cache copy (Options.NearCache, kept coherent by CLIENT
// TRACKING). A missing or stale entry goes to fetch.lua, which answers HIT,
// STALE (served while one caller refreshes: RFC 5861's
// stale-while-revalidate), LOAD to the one caller that takes the lease, or
// WAIT to the others, who are woken by the holder's notice (with the value
// inline when small). XFetch refreshes hot keys early (Vattani et al., VLDB
// 2015). A lease is a token with an expiry, renewed while the load runs; the
// commit stores only while the token holds it (Nishtala et al., NSDI 2013):
// a tool for efficiency, not a lock for correctness.
//
// Slow is not down: only a node that refuses connections or stays silent
// for RedisTimeout fails a call. Then Fetch answers from this process's
// memory (fail-safe), else calls the loader directly (fail-open), one load
// per key per process at a time, and writes are queued for Redis.
//
// The README has the guide (the options, the guarantees and their limits);
// docs/ covers operations, the HTTP sidecar, metrics (subpackages
// corralprom and corralotel), how it works, and the maintainers' design.
package corral
