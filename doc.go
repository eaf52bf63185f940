// Package corral is a stampede-safe read-through cache over Redis: when a hot
// key is missing or expiring and thousands of callers across many processes
// ask for it at once, the origin (a database query, an HTTP call) sees one
// load, and every caller gets its result about as soon as that load ends.
//
//	// rdb: any redis.UniversalClient; with ContextTimeoutEnabled, hits are
//	// read in the calling goroutine (see Hits below).
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	cache, err := corral.New(rdb, nil)
//	v, err := cache.Fetch(ctx, "user:42", 10*time.Minute, func(ctx context.Context) ([]byte, error) {
//		return db.LoadUser(ctx, 42)
//	})
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
// T is K's own hash tag when it has a non-empty one (Redis Cluster's rule: the
// text between the first '{' and the first '}' after it), otherwise the hex of
// K's 64-bit FNV-1a hash. All names of one key share one Cluster slot, so each
// script gets every key it touches; K is kept whole, so no two keys collide.
// The entry's Redis TTL is the hard TTL (soft TTL + StaleTTL); the soft expiry
// is a field, and every expiry decision uses the Redis server's clock.
//
// # Hits read, nothing more
//
// Most calls find a fresh entry. A peek reads its fields after the server's
// TIME, pipelined in one round trip, without a script or a write, and
// decides on the server's clock as fetch.lua would. With Options.NearCache,
// copies of what peeks read are also kept in memory, served until their soft
// expiry and dropped the moment Redis announces a change to their entry
// (server-assisted client-side caching: CLIENT TRACKING in broadcasting mode
// on the entries' prefix).
//
// # One round trip decides the rest
//
// For a missing or stale entry, or one that XFetch picks for an early
// refresh, Fetch sends fetch.lua, which answers from the server's state at
// once:
// a fresh entry is a HIT; an entry past its soft expiry but inside its stale
// window is served STALE while the caller that takes the lease refreshes it in
// the background (stale-while-revalidate); a fresh entry may be refreshed
// early, with a probability that rises as expiry nears in proportion to the
// last load's duration (XFetch: Vattani, Chierichetti and Lowenstein,
// "Optimal Probabilistic Cache Stampede Prevention", VLDB 2015); with no entry,
// the first caller takes the lease (SET NX PX) and LOADs, and everyone else
// WAITs.
//
// # The lease
//
// A lease is a random 128-bit token with an expiry (Nishtala et al., "Scaling
// Memcache at Facebook", NSDI 2013). Its holder runs the loader while a
// watchdog renews the lease every LeaseTTL/3, so a load may outlast LeaseTTL;
// the watchdog stops the moment the load returns, and a renewal that reaches
// Redis late is dropped by the server. commit.lua stores the result only if
// the token still holds the lease, then deletes it and publishes a notice.
// Delete and Set revoke the lease with a marker, so a load that started
// before them can never store outdated data afterwards (while the marker
// lives). A lease that Redis evicts under maxmemory is not revoked: found
// missing before its deadline, it is taken again by its holder's renewal,
// and the commit stands unless another entry was stored meanwhile. A failed
// or panicking load releases the lease by compare-and-delete. If the holder
// dies, the lease expires and another caller takes over within LeaseTTL. A
// lease is a tool for efficiency, not a lock for correctness: after a Redis
// failover that loses the lease, two loads of a key may run, and the lease
// check still keeps the older result out.
//
// # Waiting
//
// In one process, concurrent callers of a key join one flight, so a process
// talks to Redis about a key once, however many goroutines ask. A flight told
// to WAIT subscribes to the key's notice channel (one shared pub/sub
// connection per Cache; sharded SSUBSCRIBE on Redis 7+, SUBSCRIBE before),
// re-runs fetch.lua (the notice may have gone out in between), then waits for
// the notice, which carries the value when it is at most NoticeInlineLimit
// bytes, or for a timer of the lease's remaining time plus jitter, and then
// re-runs fetch.lua. No fixed sleeps, and no polling while notices can be
// heard (without channel rights, waiters re-check after 25 ms, doubling to
// 200 ms): each caller's wait ends with its own context.
//
// # Many keys
//
// FetchMany fetches many keys as Fetch fetches one, each with its own
// entry, lease and notices: their peeks go out together, one pipelined
// round trip per node (each command touches one key, so none spans two
// Cluster slots); keys under way in this process join their flights; every
// other key gets a flight of its own, and once each has taken its lease or
// found another process holding it, loadMany is called once with the keys
// this process won. Keys loadMany leaves out are cached as not found;
// errors are per key, in a *BatchError.
//
// # Values with their own freshness
//
// FetchEntry is Fetch for a loader that says how long each value lives: it
// returns an Entry, whose TTL is the soft TTL, used exactly (no jitter), and
// whose StaleTTL is its stale window. An entry with a window is served stale
// while one caller refreshes it, and is never refreshed early; TTL <= 0
// returns the value without storing it.
//
// # Failure
//
// Loads run detached from their callers (context.WithoutCancel of the first
// caller's context, bounded by LoadTimeout): a caller giving up never cancels
// the load for the others. A loader's ErrNotFound is cached negatively for
// NegativeTTL; other errors and panics reach every caller of that load and
// are not cached.
//
// Slow is not down. Commands go through a pipeline: concurrent calls share
// round trips, and a call's bound starts when it is sent. A node that
// answers anything (a PING, when in doubt) is alive, however long a big
// value takes on the wire; only a node that refuses connections (or closes
// them unanswered), refuses the client's AUTH, or stays silent for
// RedisTimeout, fails a call. Such a node is down: its circuit breaker
// trips at once, every call to it skips Redis until its recovery probe
// answers, and its queued invalidations are applied before the callers'
// calls. Meanwhile Fetch answers from this process's memory, near-cache
// copies or what a fail-open load returned (fail-safe), else calls the
// loader directly (fail-open): at most one load per key per process per
// FailSafe.Throttle. A Delete or Set that cannot reach Redis drops this
// process's copies and is queued, then applied in order once Redis
// answers. Flights already waiting for another process's load keep waiting
// for it until its lease would expire; a holder's commit is sent again
// until it lands. After repeated failures a node's breaker also skips it
// for a cool-down, then lets one call through.
//
// On a Redis Cluster, every name of a key lives in one slot; waiters keep one
// pub/sub connection per master node and follow their channels when slots
// move.
//
// # Hits
//
// A fresh entry is read without a script or a write: HMGET of its fields,
// decided on the server's clock. With a client that bounds its I/O by the
// context's deadline (go-redis's ContextTimeoutEnabled, ReadTimeout and
// WriteTimeout not -2), the read runs in the calling goroutine, as a GET
// would, bounded by 100 ms and by the caller's deadline, on the server's
// clock estimated from the node's latest TIME; if it fails, it goes on
// through the pipeline. With other clients, it goes through the pipeline,
// with a TIME. See the README's "How it works".
//
// # Observation
//
// Options.Observer is told each call's outcome, loads and waits with their
// durations, lost leases, rejected commits and the circuit breaker's
// changes, where Stats counts them; a Tracer also scopes each call and each
// load. Subpackages corralprom (Prometheus) and corralotel (OpenTelemetry)
// adapt it; the core imports neither.
//
// The Lua scripts are in scripts/*.lua; internal/wire builds and parses
// their messages; store.go is the one door to Redis: it sends them
// (scripts.go) and every other command through internal/transport, which
// batches them, watches each node's liveness, retries, keeps a circuit
// breaker per node, trips and recovers nodes found down, and reads hits
// inline; failsafe.go, rescue.go and queue.go keep the promise while Redis
// is down;
// batch.go and batchload.go hold FetchMany, entry.go FetchEntry;
// internal/notify holds the subscriptions, tracking.go the near cache's
// invalidations, rights.go and eviction.go the first-use checks of ACL
// rights and the eviction policy; Check (check.go) asks all of that at once,
// graded, for a service's start-up and `corral check`.
package corral
