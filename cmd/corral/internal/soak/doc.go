// Package soak is the engine of `corral soak`: real OS processes hammer a
// key set through corral while the soak kills and replaces them, restarts
// Redis and deletes keys, and afterwards checks invariants over everything
// that happened. The command in cmd/corral only parses flags and prints.
//
// A run has these parts, each in its own file:
//
//   - The orchestrator (run.go): this process. It starts a private
//     redis-server (internal/redisproc) unless given a URL, the origin, its
//     own corral.Cache (for Deletes) and the workers, drives the chaos on a
//     seeded schedule, stops everything and checks.
//   - The origin (origin.go): an HTTP server on loopback in the
//     orchestrator, so it survives workers and Redis. It keeps a version per
//     key, answers after the origin latency, and records every load: the
//     worker, the loader's start time (the worker's clock), arrival and end
//     (its own), the version, whether corral called the loader failing
//     open (corral.IsFailOpen), and whether the worker had seen Redis
//     trouble lately.
//   - Workers (worker.go, proc.go): the same binary re-executed, configured
//     through WorkerEnv, each with its own go-redis client and corral.Cache
//     (or, to show the checks work, plain cache-aside). Each runs Goroutines
//     callers that Fetch random keys with a Deadline and report every call
//     (key, start, end, version or error, and the outcome corral told the
//     Cache's Observer: answered from memory, failed open, a hit, ...) on
//     stdout as JSON lines, batched every few tens of milliseconds; a
//     killed worker loses only its last batch. The Observer also reports
//     when the worker's circuit breaker opens and closes. An observer of
//     corral's Stats watches for signs of Redis trouble, tags loads made in
//     it, and reports the spans.
//   - The checks (check.go, loads.go, outages.go): pure functions over
//     Records, so that tests can feed them synthetic stampedes, stale reads,
//     late calls, errors and loads around Redis restarts.
//
// Every time is wall-clock time since the run's epoch on the one host: the
// orchestrator, the workers and Redis (whose TIME corral's scripts use for
// every expiry) share that clock.
//
// The invariants, each explained at its check:
//
//  1. Loads per key per refresh <= 1, plus 1 per event that can undo a
//     refresh (checkLoads, fleet-wide, of the loads under a lease;
//     checkFlights, per process, fail-open included).
//  2. No value older than a Delete is served to a call that started after
//     the Delete returned (checkStale), but by a flight begun before it, or
//     from a worker's memory while it could not use Redis, around a restart
//     or while its own breaker was open (fail-safe's trade-off: counted,
//     and bounded by the restart's window or the breaker's report, and the
//     value's hold).
//  3. No caller past its deadline (checkCalls).
//  4. No error while fail-open was possible, and no worker that dies or
//     hangs by itself (checkCalls, Check).
//  5. Fail-open loads (corral.IsFailOpen) per key per worker process per
//     Redis restart <= 2 (one more per H = min(1s, TTL) that a restart
//     keeps Redis down past 2H - 150ms), counted from Redis going down to
//     RecoveryGrace after it answers again (checkOutages).
//
// The workers' options are fixed (config.go): a stale window as long as the
// TTL (so refreshes happen at the soft expiry, never early, which is what
// makes invariant 1 exact), Jitter 0.1, LeaseTTL 1s, RedisTimeout 200ms,
// BreakerCooldown 500ms, fail-open on.
package soak
