// Package stats owns the live counters behind corral.Stats: atomic, added
// to by every part of a Cache, and read together as a snapshot (Values,
// which converts to corral.Stats field for field).
//
// It may not touch what a counter means or when it counts: that is the
// root's (Stats' docs, and the code that counts). The calls' outcomes are
// the root's too, counted by outcome there.
package stats

import (
	"sync/atomic"
	"time"
)

// Counters are the live counters, but the calls' outcomes.
type Counters struct {
	Joined, Loads, LoadErrors, Waits, EarlyRefreshes atomic.Uint64
	Refreshes, RefreshErrors, LeasesLost, Evictions  atomic.Uint64
	CommitsRejected, RedisErrors                     atomic.Uint64
	Queued, Replayed, Dropped                        atomic.Uint64
	CommitRetries, ValuesTooLarge, Uncached          atomic.Uint64
	WritesRefused, NoticesFailed, DecodeFailures     atomic.Uint64
	BreakerOpens                                     atomic.Uint64
	Subscribes, Unsubscribes                         atomic.Uint64
	TagInvalidations, Clears, Expires                atomic.Uint64
}

// Values mirror corral.Stats, field for field and in its order, so that
// one converts to the other: a field added to Stats and not here fails
// the build. Their meaning is documented there.
type Values struct {
	Hits, NearHits, StaleHits, StaleIfError, NegativeHits, FailureHits uint64
	Misses, Coalesced, Waited, FailOpens, FailSafeHits, Errors         uint64
	Joined                                                             uint64
	Loads, LoadErrors, Waits, EarlyRefreshes, Refreshes, RefreshErrors uint64
	LeasesLost, Evictions, CommitsRejected, CommitRetries              uint64
	ValuesTooLarge, Uncached, DecodeFailures                           uint64
	WritesRefused, NoticesFailed, RedisErrors, BreakerOpens            uint64
	BreakerOpen                                                        bool
	OutageTime                                                         time.Duration
	InvalidationsQueued, InvalidationsReplayed, InvalidationsDropped   uint64
	InvalidationsPending                                               int
	Subscribes, Unsubscribes                                           uint64
	TagInvalidations, Clears, Expires                                  uint64
}

// Snapshot reads c; the outcomes, the breakers' state and the queue's
// length are the caller's to fill in.
func (c *Counters) Snapshot() Values {
	return Values{
		Joined:          c.Joined.Load(),
		Loads:           c.Loads.Load(),
		LoadErrors:      c.LoadErrors.Load(),
		Waits:           c.Waits.Load(),
		EarlyRefreshes:  c.EarlyRefreshes.Load(),
		Refreshes:       c.Refreshes.Load(),
		RefreshErrors:   c.RefreshErrors.Load(),
		LeasesLost:      c.LeasesLost.Load(),
		Evictions:       c.Evictions.Load(),
		CommitsRejected: c.CommitsRejected.Load(),
		CommitRetries:   c.CommitRetries.Load(),
		ValuesTooLarge:  c.ValuesTooLarge.Load(),
		Uncached:        c.Uncached.Load(),
		DecodeFailures:  c.DecodeFailures.Load(),
		WritesRefused:   c.WritesRefused.Load(),
		NoticesFailed:   c.NoticesFailed.Load(),
		RedisErrors:     c.RedisErrors.Load(),
		BreakerOpens:    c.BreakerOpens.Load(),

		InvalidationsQueued:   c.Queued.Load(),
		InvalidationsReplayed: c.Replayed.Load(),
		InvalidationsDropped:  c.Dropped.Load(),
		Subscribes:            c.Subscribes.Load(),
		Unsubscribes:          c.Unsubscribes.Load(),
		TagInvalidations:      c.TagInvalidations.Load(),
		Clears:                c.Clears.Load(),
		Expires:               c.Expires.Load(),
	}
}

// Subscribed, Unsubscribed and RedisError count for the notifier
// (notify.Stats).
func (c *Counters) Subscribed()   { c.Subscribes.Add(1) }
func (c *Counters) Unsubscribed() { c.Unsubscribes.Add(1) }
func (c *Counters) RedisError()   { c.RedisErrors.Add(1) }
