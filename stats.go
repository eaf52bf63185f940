package corral

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/batch"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/stats"
)

// Stats are a Cache's counters since New.
//
// A call is a Fetch, Fetch[T] or FetchEntry call, or one key of a FetchMany
// call (each distinct key counts as one; Get and the other methods are not
// calls). Every call ends in exactly one outcome, counted once as it
// returns, so the outcome fields, Hits to Errors (StaleIfError being part
// of StaleHits), partition the calls: their sum is Calls(). Each says where
// a call's answer came from: an entry in Redis (Hits, StaleHits,
// NegativeHits, FailureHits), the near cache (NearHits), this process's
// memory while Redis cannot be used (FailSafeHits), a load (Misses when
// the call's own flight ran it, Coalesced when another call's flight in
// this process did, Waited when another process did), a load run directly
// because Redis failed (FailOpens), or nothing (Errors). So those six hits
// over Calls() are the hit ratio, and Misses are the foreground loads that
// answered calls, one each however many calls a load answered (a load
// whose callers all left before it ended answers none).
//
// A flight is the in-process coalescing of concurrent calls for a key: it
// may answer many calls with one Redis conversation and at most one load.
// Loads counts every loader run (a key loaded by FetchMany's loadMany is
// one), background refreshes and fail-open loads included: what the origin
// sees.
type Stats struct {
	Hits         uint64 // calls answered with a fresh entry from Redis
	NearHits     uint64 // calls answered from the near cache, without Redis
	StaleHits    uint64 // calls answered with a stale entry (stale-while-revalidate), StaleIfError included
	StaleIfError uint64 // stale hits served after the entry's last refresh failed (RFC 5861): part of StaleHits
	NegativeHits uint64 // calls answered ErrNotFound from a negative entry
	FailureHits  uint64 // calls answered ErrCachedFailure from a cached failure (ErrorTTL)
	// Misses are calls whose own flight loaded the key in the foreground,
	// under its lease (or without storing it: over an entry a newer
	// release wrote, or a value another process could not store), and got
	// the load's result or its error: one per such load.
	Misses uint64
	// Coalesced are calls answered by a load another call in this process
	// ran: they joined its flight while it loaded (see Joined), or, as
	// Redis came back from an outage, their lease took the value of the
	// fail-open load another call had just run.
	Coalesced uint64
	// Waited are calls answered by another process's load: their flight
	// waited for its lease (Waits) and got its value, its ErrNotFound, or
	// its failure (ErrRemoteLoad).
	Waited       uint64
	FailOpens    uint64 // calls answered by a load run directly, outside any lease, because Redis failed or refused writes (fail-open; the flight's, or one shared in this process)
	FailSafeHits uint64 // calls answered from this process's memory because Redis could not be used (Options.FailSafe)
	// Errors are calls that ended with an error and no answer: arguments
	// refused (ErrInvalidKey, ErrInvalidTTL, ErrNilLoader), ErrClosed, the
	// caller's context ending first, a missing ACL right (ErrPermission),
	// a Redis error with DisableFailOpen. A load's error is not one: it
	// answers its calls (Misses, Coalesced, Waited, FailOpens).
	Errors uint64

	Joined uint64 // calls that joined a flight another call in this process started, whatever answered them (those its load answered are Coalesced); a call that joined too late for a flight's answer, and joins another, counts again

	Loads           uint64 // loader runs, including background refreshes and fail-open loads
	LoadErrors      uint64 // loader runs that failed: an error other than ErrNotFound, a panic, or LoadTimeout
	Waits           uint64 // flights that waited for another process's lease
	EarlyRefreshes  uint64 // refreshes started early by XFetch
	Refreshes       uint64 // background refreshes run (stale-while-revalidate and early)
	RefreshErrors   uint64 // background refreshes whose load failed; the old value stays
	LeasesLost      uint64 // loads whose lease was revoked or expired while they ran
	Evictions       uint64 // leases found missing before their holder's lease deadline, by a renewal or the commit: evicted (maxmemory), not revoked; not in LeasesLost, and the load's result is stored
	CommitsRejected uint64 // loaded values not stored because their lease was gone
	CommitRetries   uint64 // commits sent again after Redis failed to answer the first try
	ValuesTooLarge  uint64 // loaded values not stored because they were over MaxValueBytes
	Uncached        uint64 // loaded values not stored because their Entry's TTL was <= 0 (FetchEntry)
	DecodeFailures  uint64 // cached entries Fetch[T] could not decode, and reloaded

	WritesRefused uint64 // writes Redis refused while serving reads (OOM, READONLY): leases, commits, Sets
	NoticesFailed uint64 // notices Redis refused to publish after a write that stood (no channel rights)
	RedisErrors   uint64 // Redis calls that failed (timeouts and calls the breaker skipped included)
	BreakerOpens  uint64 // times the circuit breaker opened
	BreakerOpen   bool   // the circuit breaker is open or half-open now
	// OutageTime is how long Redis could not be used, in all: the time
	// circuit breakers were open (after BreakerThreshold failures, or at
	// once on a refused connection, a silence past RedisTimeout or a
	// refused AUTH), summed over nodes, the current outage included.
	OutageTime time.Duration

	InvalidationsQueued   uint64 // Deletes, Sets, Expires and group invalidations that could not reach Redis, queued to be applied once it answers (one of a key queued already is not counted again)
	InvalidationsReplayed uint64 // queued invalidations applied to Redis, or superseded by a later Set or Delete of the key that reached it
	InvalidationsDropped  uint64 // invalidations given up: the queue was full, Redis denied them, or Close could not apply them
	InvalidationsPending  int    // invalidations queued now, not yet applied

	Subscribes   uint64 // SUBSCRIBE / SSUBSCRIBE commands sent
	Unsubscribes uint64 // UNSUBSCRIBE / SUNSUBSCRIBE commands sent

	TagInvalidations uint64 // tags invalidated by InvalidateTags or ExpireTags, one per tag, as they reached Redis (or, queued, as replayed)
	Clears           uint64 // Clears that reached Redis
	Expires          uint64 // Expires that reached Redis (a queued one is replayed as a Delete: InvalidationsReplayed)
}

// Calls returns the number of calls s counts: the sum of their outcomes.
func (s Stats) Calls() uint64 {
	return s.Hits + s.NearHits + s.StaleHits + s.NegativeHits + s.FailureHits + s.Misses + s.Coalesced +
		s.Waited + s.FailOpens + s.FailSafeHits + s.Errors
}

// counters are the live Stats, updated atomically: the calls' outcomes
// here, the rest in internal/stats.
type counters struct {
	outcomes [nOutcomes]stats.Striped // by the outcome of a call; outNone counts Errors
	stats.Counters
}

func (c *counters) snapshot() Stats {
	s := Stats(c.Snapshot())
	out := func(o outcome) uint64 { return c.outcomes[o].Load() }
	s.Hits, s.NearHits, s.StaleHits, s.StaleIfError = out(outHit), out(outNearHit), out(outStale)+out(outStaleIfError), out(outStaleIfError)
	s.NegativeHits, s.FailureHits, s.Misses, s.Coalesced = out(outNegative), out(outFailure), out(outMiss), out(outCoalesced)
	s.Waited, s.FailOpens, s.FailSafeHits, s.Errors = out(outWaited), out(outFailOpen), out(outFailSafe), out(outNone)
	return s
}

// count counts a call's outcome, and tells the Observer (observe.go). It
// is called once per call, as the call returns: out is outNone for a call
// that ended with an error of its own (Stats.Errors).
func (c *Cache) count(ctx context.Context, key string, out outcome) {
	c.stats.outcomes[out].Add()
	c.observeOutcome(ctx, outcomeEvents[out], key)
}

// joined counts a call that joined a flight another call started
// (Stats.Joined), and returns when it joined (near.Clock), by which the
// flight's answer is judged for it (answerFor).
func (c *Cache) joined() int64 {
	c.stats.Joined.Add(1)
	return near.Clock()
}

// refused counts a call of key refused before it began (its arguments,
// its context, Close): an error of its own. It returns err.
func (c *Cache) refused(ctx context.Context, key string, err error) error {
	c.count(ctx, key, outNone)
	return err
}

// refusedMany counts a FetchMany of keys refused as a whole: an error for
// each of its keys, each distinct key once, as each counts as a call. It
// returns err.
func (c *Cache) refusedMany(ctx context.Context, keys []string, err error) error {
	for _, k := range batch.Distinct(keys) {
		c.count(ctx, k, outNone)
	}
	return err
}
