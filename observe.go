package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/observe"
	"github.com/corralhq/corral/internal/transport"
)

// Observation. A Cache tells Options.Observer what it does, at the points
// where it counts its Stats, so that metrics and traces agree with Stats:
// each Fetch call's outcome, each load and wait with its duration, and the
// protocol's exceptions (a lease lost, a commit rejected, the circuit
// breaker changing state). The core imports nothing for it; adapters live
// in subpackages (corralprom for Prometheus, corralotel for OpenTelemetry).
// Without an Observer, each point costs a nil check.

// An Observer is told what a Cache does (Options.Observer). Observe is
// called on the goroutine where the event happens: the caller's, for a
// call's outcome (a hit included), so it must be quick, must not block, and
// must be safe for concurrent use. It must not call the Cache back (breaker
// events are told under the breaker's lock), and a panic in it is not
// recovered. ctx is the context of what the event belongs to: the call's
// for outcomes, the load's for LoadStart and LoadEnd, the flight's (its
// first caller's values) for waits, leases and commits,
// context.Background() for breaker events. See EventKind for which fields
// each event sets.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// A Tracer is an Observer that also opens a scope (a span, say) around each
// Fetch call and each load (a FetchMany call has no scope of its own; each
// key it loads has its load's). Start is called, instead of Observe, with an
// event that begins one: EventFetchStart, as a call begins (before its
// arguments are checked: a call refused for them ends with its error), and
// EventLoadStart, as a loader run begins. It returns the context the scope
// runs under: ctx, or a context derived from it. The call, or the loader,
// runs under that context from then on, its events are observed with it,
// and its end (EventFetchEnd, EventLoadEnd) too; so a load started by a
// call runs, and is observed, inside that call's scope. A Tracer finds its
// scope in the context by a key of its own: another Tracer (MultiObserver)
// may have wrapped the context further.
//
// Only Tracers are told of EventFetchStart and EventFetchEnd: a plain
// Observer learns of a call through its outcome, so that a hit costs it one
// call of Observe.
type Tracer interface {
	Observer
	Start(ctx context.Context, e Event) context.Context
}

// A StatsReader is an Observer that reads the outcomes of calls from a
// Cache's Stats when it needs them (at a metrics scrape, say) instead of
// being told each one: New calls ReadStats once, with the Cache's
// Options.Prefix and its Stats method, and the Cache then tells it no
// outcome event (EventHit to EventError), so that a hit, a near hit
// above all (about 100 ns), costs it nothing. It is told every other event
// as any Observer is. corralprom's Collector is one.
type StatsReader interface {
	Observer
	ReadStats(prefix string, stats func() Stats)
}

// Event is one thing a Cache did. Which fields are set depends on Kind.
type Event struct {
	Kind   EventKind
	Prefix string // the Cache's Options.Prefix (every event)
	// Key is the cache key the event is about; "" for breaker events. Keys
	// can be many: keep them out of metric labels.
	Key string
	// Node is the Redis node (its address) of a breaker event.
	Node string
	// Duration is how long a load (EventLoadEnd), a wait (EventWaitEnd) or
	// a call (EventFetchEnd) took.
	Duration time.Duration
	// Err is how a load, a wait or a call ended; nil when it succeeded. A
	// loader's ErrNotFound is there too: see LoadFailed.
	Err error
}

// LoadFailed reports whether e ends a load that failed, as Stats.LoadErrors
// counts them: the loader returned an error other than ErrNotFound,
// panicked, or ran past LoadTimeout. A load that Close ended is not a
// failure.
func (e Event) LoadFailed() bool {
	return e.Kind == EventLoadEnd && e.Err != nil && !isNotFound(e.Err) && !errors.Is(e.Err, ErrClosed)
}

// EventKind says what an Event is. The outcomes of calls (Outcome reports
// them) partition the calls, as Stats' outcome fields do: each call (a
// Fetch, or a key of a FetchMany) has exactly one, told once as it
// returns, an error of its own included (EventError).
type EventKind uint8

const (
	_ EventKind = iota

	// Outcomes of a call, told on the caller's goroutine with its context,
	// before the call returns. See Stats for what each counts.

	EventHit          // a fresh entry from Redis (Stats.Hits)
	EventNearHit      // a value from the near cache, without Redis (Stats.NearHits)
	EventStaleHit     // a stale entry, while one caller refreshes it (Stats.StaleHits less Stats.StaleIfError)
	EventStaleIfError // a stale entry whose last refresh failed (Stats.StaleIfError)
	EventNegativeHit  // ErrNotFound from a negative entry (Stats.NegativeHits)
	EventFailureHit   // ErrCachedFailure from a cached failure, with ErrorTTL (Stats.FailureHits)
	EventMiss         // the call's own flight's load, in the foreground: one per load (Stats.Misses)
	EventFailOpen     // Redis failed: a load run directly (Stats.FailOpens)
	EventFailSafe     // Redis could not be used: a value this process held in memory (Stats.FailSafeHits)
	EventCoalesced    // a load another call in this process ran: the call joined its flight (Stats.Coalesced)
	EventWaited       // another process's load, waited for under its lease (Stats.Waited)
	EventError        // no answer: an error of the call's own, its context's, Close's, Redis's with DisableFailOpen (Stats.Errors)

	// EventLoadStart and EventLoadEnd: a loader run, in the foreground, in
	// the background (a refresh) or failing open (Stats.Loads). LoadEnd
	// has Duration and Err (Stats.LoadErrors counts those LoadFailed).
	EventLoadStart
	EventLoadEnd

	// EventWaitStart and EventWaitEnd: a flight found the key's lease held
	// by another process and waits for its load (Stats.Waits). WaitEnd has
	// Duration, and Err when the wait ended without an answer (the
	// callers left, Close, Redis failing).
	EventWaitStart
	EventWaitEnd

	// EventLeaseLost: a load's lease was revoked or expired while it ran
	// (Stats.LeasesLost).
	EventLeaseLost
	// EventCommitRejected: a loaded value was not stored, its lease being
	// gone (Stats.CommitsRejected).
	EventCommitRejected

	// The circuit breaker of Node changed state: it opened (Stats.BreakerOpens),
	// let a probe through (half-open), or closed.
	EventBreakerOpen
	EventBreakerHalfOpen
	EventBreakerClosed

	// An invalidation (Delete, Set) that could not reach Redis was queued
	// for the background to apply once Redis answers
	// (Stats.InvalidationsQueued; with the Delete's or Set's context), was
	// applied so (InvalidationsReplayed), or was dropped
	// (InvalidationsDropped: the queue was full, Redis denied it, or Close
	// could not apply it; with the Delete's or Set's context when full,
	// context.Background() otherwise, as for the replayed).
	EventInvalidationQueued
	EventInvalidationReplayed
	EventInvalidationDropped

	// EventFetchStart and EventFetchEnd, for Tracers only: a Fetch call
	// began; it returned (Duration, Err).
	EventFetchStart
	EventFetchEnd

	// Group invalidations that reached Redis (or were replayed there):
	// EventTagInvalidated once per tag of an InvalidateTags or ExpireTags
	// (Key: the tag; Stats.TagInvalidations), EventCleared for a Clear
	// (Stats.Clears), EventExpired for an Expire (Key; Stats.Expires). With
	// the call's context, context.Background() when replayed.
	EventTagInvalidated
	EventCleared
	EventExpired
)

var eventNames = [...]string{
	EventHit: "hit", EventNearHit: "near_hit", EventStaleHit: "stale_hit", EventStaleIfError: "stale_if_error",
	EventNegativeHit: "negative_hit", EventFailureHit: "failure_hit", EventMiss: "miss", EventFailOpen: "fail_open",
	EventFailSafe: "fail_safe", EventCoalesced: "coalesced", EventWaited: "waited", EventError: "error",
	EventLoadStart: "load_start", EventLoadEnd: "load_end",
	EventWaitStart: "wait_start", EventWaitEnd: "wait_end", EventLeaseLost: "lease_lost",
	EventCommitRejected: "commit_rejected", EventBreakerOpen: "breaker_open",
	EventBreakerHalfOpen: "breaker_half_open", EventBreakerClosed: "breaker_closed",
	EventInvalidationQueued: "invalidation_queued", EventInvalidationReplayed: "invalidation_replayed",
	EventInvalidationDropped: "invalidation_dropped",
	EventFetchStart:          "fetch_start", EventFetchEnd: "fetch_end",
	EventTagInvalidated: "tag_invalidated", EventCleared: "cleared", EventExpired: "expired",
}

// String returns k's name in snake case ("hit", "stale_if_error", ...),
// fit for a metric label's value.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Outcome reports whether k is the outcome of a call (EventHit to
// EventError).
func (k EventKind) Outcome() bool { return k >= EventHit && k <= EventError }

// outcomeEvents maps a call's outcome to its event.
var outcomeEvents = [nOutcomes]EventKind{
	outNone: EventError, outHit: EventHit, outNearHit: EventNearHit, outStale: EventStaleHit,
	outStaleIfError: EventStaleIfError, outNegative: EventNegativeHit, outFailure: EventFailureHit,
	outMiss: EventMiss, outFailOpen: EventFailOpen, outFailSafe: EventFailSafe,
	outCoalesced: EventCoalesced, outWaited: EventWaited,
}

// MultiObserver returns an Observer that tells each of obs, in order (nil
// ones left out). It is a Tracer when one of them is: then Start runs each
// Tracer's Start in turn, each wrapping the context the one before
// returned, and tells the plain Observers EventLoadStart through Observe;
// EventFetchStart and EventFetchEnd reach the Tracers only. It returns nil
// when obs holds no Observer.
func MultiObserver(obs ...Observer) Observer {
	in := make([]observe.Observer[Event], 0, len(obs))
	for _, o := range obs {
		if o != nil {
			in = append(in, o)
		}
	}
	m := observe.New[Event, Stats](classify, in...)
	if m == nil {
		return nil
	}
	return m.(Observer)
}

// classify is what the fan-out (internal/observe) needs to know of e.
func classify(e Event) observe.Class {
	switch {
	case e.Kind.Outcome():
		return observe.Outcome
	case e.Kind == EventFetchStart:
		return observe.FetchStart
	case e.Kind == EventFetchEnd:
		return observe.FetchEnd
	}
	return observe.Other
}

// observeOutcome tells the Observer, if it is to be told outcomes (not a
// StatsReader), of a call's outcome, kind, about key. It is inlined: a
// check of a bool is all it costs otherwise.
func (c *Cache) observeOutcome(ctx context.Context, kind EventKind, key string) {
	if c.outcomes {
		c.tell(ctx, kind, key)
	}
}

// nearHit counts a call answered from the near cache, and tells the
// Observer (as an outcome).
func (c *Cache) nearHit(ctx context.Context, key string) { c.count(ctx, key, outNearHit) }

// observing sets up o, the Cache's Observer: a StatsReader is given the
// Cache's Stats, and whether outcomes are told is decided once.
func (c *Cache) observing(o Observer) {
	c.tracer, _ = o.(Tracer)
	if r, ok := o.(StatsReader); ok {
		r.ReadStats(c.opts.Prefix, c.Stats)
	}
	c.outcomes = o != nil && observe.WantsOutcomes[Event, Stats](o)
}

// observe tells the Observer, if any, of an event of kind about key. It
// is inlined: without an Observer, a nil check is all it costs.
func (c *Cache) observe(ctx context.Context, kind EventKind, key string) {
	if c.opts.Observer != nil {
		c.tell(ctx, kind, key)
	}
}

// tell tells the Observer of an event of kind about key. Kept out of line,
// so that observe stays small enough to inline.
//
//go:noinline
func (c *Cache) tell(ctx context.Context, kind EventKind, key string) {
	c.opts.Observer.Observe(ctx, Event{Kind: kind, Prefix: c.opts.Prefix, Key: key})
}

// traced runs call, a Fetch of key, in the Tracer's scope of it: the
// Tracer is told that the call begins (its context is the call's from
// then on) and how it ended. Without a Tracer, Fetch calls call directly:
// a call's scope costs nothing then, not even a defer.
func traced[T any](c *Cache, ctx context.Context, key string, call func(context.Context) (T, error)) (T, error) {
	if ctx == nil {
		return call(ctx) // which panics, saying so
	}
	start := time.Now()
	ctx = c.tracer.Start(ctx, Event{Kind: EventFetchStart, Prefix: c.opts.Prefix, Key: key})
	v, err := call(ctx)
	c.tracer.Observe(ctx, Event{Kind: EventFetchEnd, Prefix: c.opts.Prefix, Key: key, Duration: time.Since(start), Err: err})
	return v, err
}

// loadStarted tells the Observer that a load of key begins, under ctx; the
// context it returns is the loader's (a Tracer's scope).
func (c *Cache) loadStarted(ctx context.Context, key string) context.Context {
	e := Event{Kind: EventLoadStart, Prefix: c.opts.Prefix, Key: key}
	switch {
	case c.tracer != nil:
		return c.tracer.Start(ctx, e)
	case c.opts.Observer != nil:
		c.opts.Observer.Observe(ctx, e)
	}
	return ctx
}

// loadEnded tells the Observer that the load of key that loadStarted
// began ended after took, with err.
func (c *Cache) loadEnded(ctx context.Context, key string, took time.Duration, err error) {
	if c.opts.Observer != nil {
		c.opts.Observer.Observe(ctx, Event{Kind: EventLoadEnd, Prefix: c.opts.Prefix, Key: key, Duration: took, Err: err})
	}
}

// waitStarted counts a flight that begins to wait for another process's
// lease, and tells the Observer.
func (c *Cache) waitStarted(f *flight, w *waiting) {
	c.stats.Waits.Add(1)
	w.began = time.Now()
	c.observe(f.ctx, EventWaitStart, f.key)
}

// waitEnded tells the Observer that f's wait, if it waited, ended with
// err. Only the first call after a wait began tells it.
func (c *Cache) waitEnded(f *flight, w *waiting, err error) {
	if w.began.IsZero() || w.ended || c.opts.Observer == nil {
		return
	}
	w.ended = true
	c.opts.Observer.Observe(f.ctx, Event{Kind: EventWaitEnd, Prefix: c.opts.Prefix, Key: f.key, Duration: time.Since(w.began), Err: err})
}

// observeBreaker tells o's Observer that node's circuit breaker changed
// to state.
func observeBreaker(o Options, node string, state transport.BreakerState) {
	if o.Observer == nil {
		return
	}
	kind := EventBreakerHalfOpen
	switch state {
	case transport.BreakerOpen:
		kind = EventBreakerOpen
	case transport.BreakerClosed:
		kind = EventBreakerClosed
	}
	o.Observer.Observe(context.Background(), Event{Kind: kind, Prefix: o.Prefix, Node: node})
}
