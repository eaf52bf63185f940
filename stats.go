package corral

import (
	"sync/atomic"
	"time"
)

// Stats are a Cache's counters since New. "Calls" are Fetch calls, and
// each key of a FetchMany call counts as one; one flight (the in-process
// coalescing of concurrent calls for a key) may answer many calls with one
// Redis conversation. A key loaded by FetchMany's loadMany counts as one
// loader run.
type Stats struct {
	Hits         uint64 // calls answered with a fresh value from Redis
	NearHits     uint64 // calls answered from the near cache, without Redis
	StaleHits    uint64 // calls answered with a stale value (stale-while-revalidate)
	NegativeHits uint64 // calls answered ErrNotFound from a negative entry
	FailureHits  uint64 // calls answered ErrCachedFailure from a cached failure (ErrorTTL)
	StaleIfError uint64 // stale hits served after the entry's last refresh failed (RFC 5861)
	Misses       uint64 // calls that found no usable entry and got a load's result (or its error)
	Coalesced    uint64 // calls that joined another caller's in-process flight

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

	FailOpens     uint64 // calls answered by the loader directly because Redis failed or refused writes
	FailSafeHits  uint64 // calls answered from this process's memory because Redis could not be used (Options.FailSafe)
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

	InvalidationsQueued   uint64 // Deletes and Sets that could not reach Redis, queued to be applied once it answers (one of a key queued already is not counted again)
	InvalidationsReplayed uint64 // queued invalidations applied to Redis, or superseded by a later Set or Delete of the key that reached it
	InvalidationsDropped  uint64 // invalidations given up: the queue was full, Redis denied them, or Close could not apply them
	InvalidationsPending  int    // invalidations queued now, not yet applied

	Subscribes   uint64 // SUBSCRIBE / SSUBSCRIBE commands sent
	Unsubscribes uint64 // UNSUBSCRIBE / SUNSUBSCRIBE commands sent
}

// counters are the live Stats, updated atomically.
type counters struct {
	hits, staleHits, negativeHits, misses, coalesced atomic.Uint64
	nearHits                                         atomic.Uint64
	failureHits, staleIfError                        atomic.Uint64
	loads, loadErrors, waits, earlyRefreshes         atomic.Uint64
	refreshes, refreshErrors, leasesLost, evictions  atomic.Uint64
	commitsRejected, failOpens, redisErrors          atomic.Uint64
	failSafeHits                                     atomic.Uint64
	queued, replayed, dropped                        atomic.Uint64
	commitRetries, valuesTooLarge, uncached          atomic.Uint64
	writesRefused, noticesFailed, decodeFailures     atomic.Uint64
	breakerOpens                                     atomic.Uint64
	subscribes, unsubscribes                         atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Hits:            c.hits.Load(),
		NearHits:        c.nearHits.Load(),
		StaleHits:       c.staleHits.Load(),
		NegativeHits:    c.negativeHits.Load(),
		FailureHits:     c.failureHits.Load(),
		StaleIfError:    c.staleIfError.Load(),
		Misses:          c.misses.Load(),
		Coalesced:       c.coalesced.Load(),
		Loads:           c.loads.Load(),
		LoadErrors:      c.loadErrors.Load(),
		Waits:           c.waits.Load(),
		EarlyRefreshes:  c.earlyRefreshes.Load(),
		Refreshes:       c.refreshes.Load(),
		RefreshErrors:   c.refreshErrors.Load(),
		LeasesLost:      c.leasesLost.Load(),
		Evictions:       c.evictions.Load(),
		CommitsRejected: c.commitsRejected.Load(),
		CommitRetries:   c.commitRetries.Load(),
		ValuesTooLarge:  c.valuesTooLarge.Load(),
		Uncached:        c.uncached.Load(),
		DecodeFailures:  c.decodeFailures.Load(),
		FailOpens:       c.failOpens.Load(),
		FailSafeHits:    c.failSafeHits.Load(),
		WritesRefused:   c.writesRefused.Load(),
		NoticesFailed:   c.noticesFailed.Load(),
		RedisErrors:     c.redisErrors.Load(),
		BreakerOpens:    c.breakerOpens.Load(),

		InvalidationsQueued:   c.queued.Load(),
		InvalidationsReplayed: c.replayed.Load(),
		InvalidationsDropped:  c.dropped.Load(),
		Subscribes:            c.subscribes.Load(),
		Unsubscribes:          c.unsubscribes.Load(),
	}
}

// Subscribed, Unsubscribed and RedisError count for the notifier
// (notify.Stats).
func (c *counters) Subscribed()   { c.subscribes.Add(1) }
func (c *counters) Unsubscribed() { c.unsubscribes.Add(1) }
func (c *counters) RedisError()   { c.redisErrors.Add(1) }
