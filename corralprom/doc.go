// Package corralprom exports what corral Caches do as Prometheus metrics.
// A Collector is both a prometheus.Collector, to register, and a
// corral.Observer, to set as Options.Observer of one Cache or of several:
//
//	metrics, err := corralprom.New(nil)
//	prometheus.MustRegister(metrics)
//	cache, err := corral.New(rdb, &corral.Options{Prefix: "shop", Observer: metrics})
//
// Every series has a prefix label, the Cache's Options.Prefix (Caches with
// one prefix add up); cache keys are never labels. The metrics, under the
// namespace corral:
//
//	corral_fetches_total{prefix,outcome}         counter    calls, by outcome (below); each call has exactly one
//	corral_coalesced_total{prefix}               counter    corral_fetches_total{outcome="coalesced"} again, for
//	                                                        the dashboards that read it
//	corral_loads_total{prefix}                   counter    loader runs started: foreground, background
//	                                                        refreshes, fail-open (what the origin sees)
//	corral_load_errors_total{prefix}             counter    loader runs that failed (corral.Event.LoadFailed)
//	corral_load_duration_seconds{prefix}         histogram  loader runs' durations
//	corral_waits_total{prefix}                   counter    waits for another process's load (lease), one per
//	                                                        flight however many calls joined it
//	corral_wait_duration_seconds{prefix}         histogram  those waits' durations
//	corral_leases_lost_total{prefix}             counter    leases revoked or expired during their load
//	corral_commits_rejected_total{prefix}        counter    loaded values not stored: their lease was gone
//	corral_breaker_opens_total{prefix,node}      counter    times a node's circuit breaker opened
//	corral_breaker_open{prefix,node}             gauge      1 while it is open or half-open, else 0
//	corral_outage_seconds_total{prefix}          counter    time the breakers were open, summed over
//	                                                        nodes, the current outage included
//	                                                        (Stats.OutageTime)
//	corral_invalidations_queued_total{prefix}    counter    Deletes, Sets and group invalidations that could not reach Redis,
//	                                                        queued to be applied once it answers
//	corral_invalidations_replayed_total{prefix}  counter    queued invalidations applied to Redis
//	corral_invalidations_dropped_total{prefix}   counter    invalidations given up: the queue was full,
//	                                                        or Redis denied them
//	corral_invalidations_pending{prefix}         gauge      invalidations queued now, not yet applied
//	corral_group_invalidations_total{prefix,kind} counter   group invalidations that reached Redis:
//	                                                        kind "tag" (one per tag of InvalidateTags or
//	                                                        ExpireTags: Stats.TagInvalidations), "clear"
//	                                                        (Stats.Clears), "expire" (Stats.Expires)
//
// A call is a Fetch, Fetch[T] or FetchEntry call, or a key of a FetchMany
// call. Every call counts exactly one outcome of corral_fetches_total, so
// the outcomes add up to the calls made; each says where the call's answer
// came from (corral.EventKind, and the corral.Stats field it is):
//
//	hit             a fresh entry from Redis                            Stats.Hits
//	near_hit        the near cache's copy, without Redis                Stats.NearHits
//	stale_hit       a stale entry, while one call refreshes it          Stats.StaleHits - Stats.StaleIfError
//	stale_if_error  a stale entry whose last refresh failed (RFC 5861)  Stats.StaleIfError
//	negative_hit    ErrNotFound from a negative entry                   Stats.NegativeHits
//	failure_hit     ErrCachedFailure from a cached failure (ErrorTTL)   Stats.FailureHits
//	miss            the load of the call's own flight, under its        Stats.Misses
//	                lease: one per foreground load, however many calls
//	                it answered (its error too)
//	coalesced       a load another call in this process ran: the call   Stats.Coalesced
//	                joined its flight
//	waited          another process's load: the call's flight waited    Stats.Waited
//	                for its lease (its value, ErrNotFound or its error)
//	fail_open       a load run directly because Redis failed            Stats.FailOpens
//	fail_safe       this process's memory, while Redis cannot be used   Stats.FailSafeHits
//	error           no answer: the call's own error (its context ended  Stats.Errors
//	                first, Close, its arguments, a missing ACL right,
//	                a Redis error with DisableFailOpen)
//
// So the hit ratio is the answers from a cache over all calls, and the
// share of calls that waited for a load of their own is the misses over
// all calls:
//
//	sum by (prefix) (rate(corral_fetches_total{outcome=~"hit|near_hit|stale_hit|stale_if_error|negative_hit|failure_hit|fail_safe"}[5m]))
//	  / sum by (prefix) (rate(corral_fetches_total[5m]))
//	sum by (prefix) (rate(corral_fetches_total{outcome="miss"}[5m])) / sum by (prefix) (rate(corral_fetches_total[5m]))
//
// The metrics agree with corral.Stats: corral_fetches_total{outcome="hit"}
// is Stats.Hits, {outcome="stale_hit"} plus {outcome="stale_if_error"} is
// Stats.StaleHits, corral_invalidations_pending is
// Stats.InvalidationsPending, and so on. corral_fetches_total,
// corral_coalesced_total, corral_outage_seconds_total and
// corral_invalidations_pending are read from the Stats of each Cache
// observed when they are collected (a Collector is a corral.StatsReader),
// so a hit costs the Collector nothing at all; the other metrics are
// counted as their events come. A Collector keeps each Cache it observes
// (its Stats method) for as long as it lives: a closed Cache's counts stay
// in the totals, and so do its Stats' outage time and pending
// invalidations (those Close could not apply).
package corralprom
