// Package corralotel traces and measures what corral Caches do through the
// OpenTelemetry API. An Observer is a corral.Tracer, to set, with its
// StatsReader beside it, as Options.Observer of one Cache or of several:
//
//	obs, err := corralotel.New(nil) // the global TracerProvider and MeterProvider
//	cache, err := corral.New(rdb, &corral.Options{Observer: corral.MultiObserver(obs, obs.StatsReader())})
//
// Spans. Each Fetch call (and Fetch[T] and FetchEntry; not FetchMany,
// whose loads are spans in the caller's context) is a span, corral.fetch,
// with attributes corral.prefix, corral.outcome (below), corral.coalesced
// (true when the outcome is coalesced) and, with Options.RecordKeys,
// corral.key.
// Each loader run is a span, corral.load, a child of the span of the call
// that started it (a background refresh's too), and the loader's context
// holds it, so what the loader traces (its database query, say) nests
// inside. A wait for another process's load is a span, corral.wait, a child
// of the waiting call's. A call or a load that failed has the error status;
// ErrNotFound is not a failure. A lost lease and a rejected commit are
// events (corral.lease_lost, corral.commit_rejected) on the call's span.
//
// Metrics, each with the attribute corral.prefix:
//
//	corral.fetches                 counter        {call}          calls, by corral.outcome: each has exactly one
//	corral.fetch.duration          histogram      s               calls' durations, by corral.outcome
//	corral.coalesced               counter        {call}          corral.fetches of corral.outcome coalesced again
//	corral.loads                   counter        {load}          loader runs started: foreground, background
//	                                                              refreshes, fail-open (what the origin sees)
//	corral.load.errors             counter        {load}          loader runs that failed (corral.Event.LoadFailed)
//	corral.load.duration           histogram      s               loader runs' durations
//	corral.waits                   counter        {wait}          waits for another process's load, one per flight
//	corral.wait.duration           histogram      s               those waits' durations
//	corral.leases.lost             counter        {lease}         leases revoked or expired during their load
//	corral.commits.rejected        counter        {commit}        loaded values not stored: their lease was gone
//	corral.breaker.opens           counter        {open}          times a node's circuit breaker opened (corral.node)
//	corral.breaker.open            gauge          {state}         1 while it is open or half-open, else 0 (corral.node)
//	corral.outage.time             counter        s               time the breakers were open, summed over nodes,
//	                                                              the current outage included (Stats.OutageTime)
//	corral.invalidations.queued    counter        {invalidation}  Deletes and Sets that could not reach Redis, queued
//	corral.invalidations.replayed  counter        {invalidation}  queued invalidations applied to Redis
//	corral.invalidations.dropped   counter        {invalidation}  invalidations given up: the queue was full, or Redis
//	                                                              denied them
//	corral.invalidations.pending   updowncounter  {invalidation}  invalidations queued now, not yet applied
//
// A call is a Fetch, Fetch[T] or FetchEntry call, or a key of a FetchMany
// call (counted in corral.fetches, not timed in corral.fetch.duration).
// Every call has exactly one corral.outcome, so the outcomes add up to the
// calls made; each says where the call's answer came from (corral.EventKind,
// and the corral.Stats field it is):
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
// So the hits (hit to failure_hit, and fail_safe) over all calls are the
// hit ratio, and miss over all calls the share of calls that waited for a
// load of their own.
//
// The metrics agree with corral.Stats. corral.outage.time and
// corral.invalidations.pending are observable instruments read from the
// Caches' Stats at each collection, and need the Observer's StatsReader
// beside it (Observer.StatsReader): without it they have no data points.
// The others are counted as their events come. Keys are never metric
// attributes.
//
// Cost: a span per call is what tracing costs. With the OpenTelemetry SDK,
// every span sampled, it added about 2 µs and 3 allocations to a call
// (1.12-1.18x a hit from Redis); with a TracerProvider that records
// nothing, the metrics alone added about 0.65 µs and 1 allocation
// (BenchmarkObserverCost, in this package's tests).
package corralotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/byprefix"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of corral's tracer and meter.
const ScopeName = "github.com/corralhq/corral/corralotel"

// Options configures an Observer. A nil *Options means all defaults.
type Options struct {
	// TracerProvider makes the spans. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider

	// MeterProvider makes the metrics. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider

	// RecordKeys adds each call's and each load's cache key to its span
	// (corral.key). Keys may hold personal data; default off.
	RecordKeys bool
}

// Observer traces and measures the Caches it observes (a corral.Tracer).
// It is safe for concurrent use; create it with New.
type Observer struct {
	tracer     trace.Tracer
	recordKeys bool
	m          instruments

	attrs   byprefix.List[*prefixed] // one per prefix seen
	mu      sync.Mutex               // guards sources
	sources []source                 // the Caches whose Stats give the outage time and the pending invalidations
}

var (
	_ corral.Tracer      = (*Observer)(nil)
	_ corral.StatsReader = statsReader{}
)

// New returns an Observer, or the error of creating its instruments.
func New(opts *Options) (*Observer, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	meter := o.MeterProvider.Meter(ScopeName)
	m, err := newInstruments(meter)
	if err != nil {
		return nil, err
	}
	obs := &Observer{tracer: o.TracerProvider.Tracer(ScopeName), recordKeys: o.RecordKeys, m: m}
	if _, err := meter.RegisterCallback(obs.observeStats, m.outage, m.pending); err != nil {
		return nil, fmt.Errorf("corralotel: registering the callback of the instruments read from Stats: %w", err)
	}
	return obs, nil
}

// scope is the context of a call or a load this Observer opened: the
// context the tracer returned, the span, and the call's state, in one
// allocation. The state changes only on the caller's goroutine, where a
// call's outcome events and its end are told.
type scope struct {
	context.Context
	key     any // callKey or loadKey: pointer-shaped, so boxing them allocates nothing
	span    trace.Span
	outcome corral.EventKind // a call's; 0 until it has one
}

// The keys of an Observer's scopes in a context.
type (
	callKey struct{ o *Observer }
	loadKey struct{ o *Observer }
)

func (s *scope) Value(key any) any {
	if key == s.key {
		return s
	}
	return s.Context.Value(key)
}

// callOf and loadOf return the scope of a call, or of a load, this Observer
// opened in ctx, or nil.
func (o *Observer) callOf(ctx context.Context) *scope {
	s, _ := ctx.Value(callKey{o}).(*scope)
	return s
}

func (o *Observer) loadOf(ctx context.Context) *scope {
	s, _ := ctx.Value(loadKey{o}).(*scope)
	return s
}

// Start opens the span of a Fetch call (corral.EventFetchStart) or of a load
// (corral.EventLoadStart) (corral.Tracer).
func (o *Observer) Start(ctx context.Context, e corral.Event) context.Context {
	load := e.Kind == corral.EventLoadStart
	if !load && e.Kind != corral.EventFetchStart {
		o.Observe(ctx, e)
		return ctx
	}
	p := o.prefixed(e.Prefix)
	name, opts, key := "corral.fetch", p.start, any(callKey{o})
	if load {
		o.m.loads.Add(ctx, 1, p.add...)
		name, key = "corral.load", loadKey{o}
	}
	if o.recordKeys {
		opts = []trace.SpanStartOption{trace.WithAttributes(attrPrefix.String(e.Prefix), attrKey.String(e.Key))}
	}
	ctx, span := o.tracer.Start(ctx, name, opts...)
	return &scope{Context: ctx, key: key, span: span}
}

// Observe records e (corral.Observer).
func (o *Observer) Observe(ctx context.Context, e corral.Event) {
	p := o.prefixed(e.Prefix)
	switch e.Kind {
	case corral.EventFetchEnd:
		o.endCall(ctx, p, e)
	case corral.EventLoadStart: // from a caller that did not take this for a Tracer (a wrapper's)
		o.m.loads.Add(ctx, 1, p.add...)
	case corral.EventLoadEnd:
		o.endLoad(ctx, p, e)
	case corral.EventWaitStart:
		o.m.waits.Add(ctx, 1, p.add...)
	case corral.EventWaitEnd:
		o.m.waitSeconds.Record(ctx, e.Duration.Seconds(), p.record...)
		opts := append([]trace.SpanStartOption{trace.WithTimestamp(time.Now().Add(-e.Duration))}, p.start...)
		if o.recordKeys {
			opts = append(opts, trace.WithAttributes(attrKey.String(e.Key)))
		}
		_, span := o.tracer.Start(ctx, "corral.wait", opts...)
		failed(span, e.Err)
		span.End()
	case corral.EventLeaseLost:
		o.m.leasesLost.Add(ctx, 1, p.add...)
		trace.SpanFromContext(ctx).AddEvent("corral.lease_lost")
	case corral.EventCommitRejected:
		o.m.commitsRejected.Add(ctx, 1, p.add...)
		trace.SpanFromContext(ctx).AddEvent("corral.commit_rejected")
	case corral.EventBreakerOpen, corral.EventBreakerHalfOpen, corral.EventBreakerClosed:
		o.breaker(ctx, e)
	case corral.EventInvalidationQueued:
		o.m.queued.Add(ctx, 1, p.add...)
	case corral.EventInvalidationReplayed:
		o.m.replayed.Add(ctx, 1, p.add...)
	case corral.EventInvalidationDropped:
		o.m.dropped.Add(ctx, 1, p.add...)
	case corral.EventTagInvalidated, corral.EventCleared, corral.EventExpired:
		kind := "tag"
		switch e.Kind {
		case corral.EventCleared:
			kind = "clear"
		case corral.EventExpired:
			kind = "expire"
		}
		o.m.groups.Add(ctx, 1, metric.WithAttributes(attrPrefix.String(p.prefix), attribute.String("corral.kind", kind)))
	default:
		if e.Kind.Outcome() {
			o.m.fetches.Add(ctx, 1, p.outcomes[e.Kind].add...)
			if e.Kind == corral.EventCoalesced {
				o.m.coalesced.Add(ctx, 1, p.add...)
			}
			if c := o.callOf(ctx); c != nil {
				c.outcome = e.Kind
			}
		}
	}
}

// endCall ends a call's span, and records its duration.
func (o *Observer) endCall(ctx context.Context, p *prefixed, e corral.Event) {
	c := o.callOf(ctx)
	if c == nil {
		return
	}
	end := &p.outcomes[c.outcome]
	o.m.fetchSeconds.Record(ctx, e.Duration.Seconds(), end.record...)
	c.span.SetAttributes(end.span...)
	if !errors.Is(e.Err, corral.ErrNotFound) {
		failed(c.span, e.Err)
	}
	c.span.End()
}

// endLoad ends a load's span, and records it.
func (o *Observer) endLoad(ctx context.Context, p *prefixed, e corral.Event) {
	o.m.loadSeconds.Record(ctx, e.Duration.Seconds(), p.record...)
	if e.LoadFailed() {
		o.m.loadErrors.Add(ctx, 1, p.add...)
	}
	if l := o.loadOf(ctx); l != nil {
		if e.LoadFailed() {
			failed(l.span, e.Err)
		}
		l.span.End()
	}
}

// breaker records a circuit breaker's change of state.
func (o *Observer) breaker(ctx context.Context, e corral.Event) {
	attrs := metric.WithAttributes(attrPrefix.String(e.Prefix), attrNode.String(e.Node))
	open := int64(1)
	switch e.Kind {
	case corral.EventBreakerOpen:
		o.m.breakerOpens.Add(ctx, 1, attrs)
	case corral.EventBreakerClosed:
		open = 0
	}
	o.m.breakerOpen.Record(ctx, open, attrs)
}

// failed gives span the error status of err, if any.
func failed(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// outcomeName is the corral.outcome of a call whose outcome is k (0: none,
// for a call whose outcome its Observer was not told: a Cache it does not
// observe itself, say).
func outcomeName(k corral.EventKind) string {
	if k.Outcome() {
		return k.String()
	}
	return "none"
}

// nOutcomes sizes the arrays indexed by a call's outcome
// (corral.EventKind.Outcome: EventHit to EventError; 0 is none).
const nOutcomes = corral.EventError + 1

// prefixed holds what one prefix's spans and metrics are given, made once,
// so that a call allocates no attributes.
type prefixed struct {
	prefix   string
	start    []trace.SpanStartOption // of a call's or a load's span
	add      []metric.AddOption
	record   []metric.RecordOption
	observe  []metric.ObserveOption
	outcomes [nOutcomes]outcomeAttrs // by outcome; [0] is none
}

// outcomeAttrs are the attributes of an outcome: the metrics' options, and
// the attributes a call's span ends with.
type outcomeAttrs struct {
	add    []metric.AddOption
	record []metric.RecordOption
	span   []attribute.KeyValue
}

// prefixed returns prefix's attributes, making them the first time.
func (o *Observer) prefixed(prefix string) *prefixed { return o.attrs.Get(prefix, newPrefixed) }

// newPrefixed makes prefix's attributes.
func newPrefixed(prefix string) *prefixed {
	set := metric.WithAttributeSet(attribute.NewSet(attrPrefix.String(prefix)))
	p := &prefixed{prefix: prefix, add: []metric.AddOption{set}, record: []metric.RecordOption{set},
		observe: []metric.ObserveOption{set}, start: []trace.SpanStartOption{trace.WithAttributes(attrPrefix.String(prefix))}}
	for k := range p.outcomes {
		kind := corral.EventKind(k)
		outcome := attrOutcome.String(outcomeName(kind))
		set := metric.WithAttributeSet(attribute.NewSet(attrPrefix.String(prefix), outcome))
		p.outcomes[k] = outcomeAttrs{add: []metric.AddOption{set}, record: []metric.RecordOption{set},
			span: []attribute.KeyValue{outcome, attrCoalesced.Bool(kind == corral.EventCoalesced)}}
	}
	return p
}
