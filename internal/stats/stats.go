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
	"unsafe"
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

// Striped is a counter that goroutines on many cores add to at once, as
// every call counts its outcome. One shared atomic counter cost a near hit
// on 2 cores a third of its time: each add missed the cache line the other
// core had just written. A Striped spreads its adds over stripes cache
// lines, each goroutine always on the same one (picked by the address of
// its stack, which stays put but when the stack grows), so that a
// goroutine's adds stay in its core's cache while it runs there; Load
// sums them.
type Striped struct {
	lines [stripes]struct {
		n atomic.Uint64
		_ [56]byte // the rest of its 64-byte cache line
	}
}

// stripes is how many cache lines a Striped spreads its adds over: two
// running goroutines share one with probability 1/stripes.
const stripes = 1 << 5

// Add adds 1.
func (s *Striped) Add() {
	var here byte
	at := uint64(uintptr(unsafe.Pointer(&here)) >> 11) // goroutine stacks are 2 KiB apart at least
	s.lines[at*0x9e3779b97f4a7c15>>59].n.Add(1)        // Fibonacci hashing: the top 5 bits, 0 to 31
}

// Load returns the sum of the adds.
func (s *Striped) Load() (n uint64) {
	for i := range s.lines {
		n += s.lines[i].n.Load()
	}
	return n
}
