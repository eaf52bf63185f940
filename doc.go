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
// # The API
//
// New (or Must, for set-up code) makes a Cache; Options configures it, and
// each field's zero value is its default. Fetch returns a key's value,
// calling the loader once across the fleet when the value is missing or
// stale; Fetch[T] is Fetch for a type, encoded with Options.Codec (JSON by
// default). FetchMany and FetchMany[T] fetch many keys at once, with one
// call of the loader for the keys this process loads, and errors per key in
// a *BatchError. FetchEntry takes a loader that sets each value's TTL and
// stale window (an Entry). Get reads without loading (ErrMiss when absent);
// Set and Delete write, and stop a load already running from storing older
// data. Stats counts what a Cache did, Observer is told as it happens,
// Health says whether Redis can be used, and Close hands running loads over
// to other processes. Check says, before the first call, what a Cache will
// meet on a given Redis.
//
// A loader returns ErrNotFound for "no such record", which is cached too
// (NegativeTTL). Errors are sentinels matched with errors.Is (ErrNotFound,
// ErrMiss, ErrClosed, ErrLoadTimeout, ErrRemoteLoad, ErrRedisTimeout,
// ErrCircuitOpen, ErrWriteRefused, ErrPermission, ...), and an error's text
// says "corral: " once, at the front, however many errors it wraps.
//
// # Keys
//
// For a cache key K under prefix P (Options.Prefix, default "corral"), corral
// creates, and users may inspect with redis-cli:
//
//	P:e:{T}:K  entry: a hash with v (payload; z instead when compressed),
//	           s (soft expiry, server ms), d (last load duration, ms),
//	           f (flags: "n" = not found, ...), t (the commit's lease token),
//	           c (the writer's CodecVersion; absent: 0)
//	P:l:{T}:K  lease: a string holding the current lease token, with PX = LeaseTTL
//	           (or the marker "backoff": a revocation, or a failed refresh's backoff)
//	P:n:{T}:K  notice channel: completion notices for waiters
//
// T is K's own hash tag when it has a non-empty one, otherwise the hex of K's
// 64-bit FNV-1a hash, so all names of one key share one Cluster slot. The
// entry's Redis TTL is the hard TTL (soft TTL + StaleTTL); the soft expiry is
// a field, and every expiry decision uses the Redis server's clock.
//
// # The protocol
//
// Most calls find a fresh entry: a peek reads its fields (HMGET) and decides
// on the server's clock, without a script or a write. With Options.NearCache,
// copies of what peeks read are also kept in memory, served until their soft
// expiry, and dropped the moment Redis announces a change to their entry
// (CLIENT TRACKING in broadcasting mode on the entries' prefix).
//
// For a missing or stale entry, or one that XFetch picks for an early
// refresh, one round trip decides the rest: fetch.lua answers HIT; STALE
// inside the stale window, served at once while the caller that takes the
// lease refreshes it in the background (stale-while-revalidate); LOAD to the
// first caller of a missing entry, which takes the lease; WAIT to everyone
// else. XFetch refreshes a fresh entry early, with a probability that rises
// as expiry nears in proportion to the last load's duration (Vattani,
// Chierichetti and Lowenstein, "Optimal Probabilistic Cache Stampede
// Prevention", VLDB 2015).
//
// A lease is a random 128-bit token with an expiry (Nishtala et al.,
// "Scaling Memcache at Facebook", NSDI 2013). Its holder runs the loader while
// a watchdog renews the lease every LeaseTTL/3; commit.lua stores the result
// only if the token still holds the lease, then deletes it and publishes a
// notice. Delete and Set revoke the lease with a marker, so a load that
// started before them never stores outdated data (while the marker lives).
// If the holder dies, the lease expires and another caller takes over within
// LeaseTTL. A lease is a tool for efficiency, not a lock for correctness:
// after a failover that loses it, two loads of a key may run, and the lease
// check still keeps the older result out.
//
// In one process, concurrent callers of a key join one flight, so a process
// talks to Redis about a key once. A flight told to WAIT subscribes to the
// key's notice channel (sharded pub/sub on Redis 7+) and waits for the
// notice, which carries small values inline, with a timer of the lease's
// remaining time as the fallback: no fixed sleeps, and each caller's wait
// ends with its own context.
//
// # Failure
//
// Loads run detached from their callers (context.WithoutCancel of the first
// caller's context, bounded by LoadTimeout): a caller giving up never
// cancels the load for the others. A loader's ErrNotFound is cached for
// NegativeTTL; other errors and panics reach every caller of that load and
// are not cached.
//
// Slow is not down. A node that answers anything is waited for, however long
// a big value takes; only a node that refuses connections (or closes them
// unanswered), refuses the client's AUTH, or stays silent for RedisTimeout
// fails a call. Such a node is down: its circuit breaker trips at once, and
// every call skips it until its recovery probe answers. Meanwhile Fetch
// answers from this process's memory, near-cache copies or what a fail-open
// load returned (fail-safe), else calls the loader directly (fail-open): at
// most one load per key per process per FailSafe.Throttle. A Delete or Set
// that cannot reach Redis drops this process's copies and is queued, then
// applied in order once Redis answers. A full Redis (OOM) or a replica still
// serves hits; a missing ACL right is ErrPermission, without a load.
//
// # Read more
//
// The README has the guide: install, the options, the guarantees and their
// limits. docs/operations.md covers Redis's settings, ACLs, eviction,
// outages and Cluster failovers; docs/how-it-works.md each step in detail;
// docs/observability.md the metrics and traces of subpackages corralprom
// and corralotel, which the core does not import. The Lua scripts, which
// hold every Redis interaction, are in scripts/*.lua; docs/design.md, the
// maintainers' design, says where everything else lives.
package corral
