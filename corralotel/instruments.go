package corralotel

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The attributes of corral's spans and metrics.
const (
	attrPrefix    = attribute.Key("corral.prefix")
	attrOutcome   = attribute.Key("corral.outcome")
	attrCoalesced = attribute.Key("corral.coalesced")
	attrKey       = attribute.Key("corral.key")
	attrNode      = attribute.Key("corral.node")
)

// durationBuckets are the histograms' bucket boundaries, in seconds: from a
// millisecond to corral's default LoadTimeout, and beyond.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// instruments are an Observer's metrics.
type instruments struct {
	fetches, coalesced, loads, loadErrors, waits metric.Int64Counter
	leasesLost, commitsRejected, breakerOpens    metric.Int64Counter
	queued, replayed, dropped                    metric.Int64Counter
	groups                                       metric.Int64Counter // attribute corral.kind: tag, clear, expire
	fetchSeconds, loadSeconds, waitSeconds       metric.Float64Histogram
	breakerOpen                                  metric.Int64Gauge
	outage                                       metric.Float64ObservableCounter     // read from Stats (Observer.StatsReader)
	pending                                      metric.Int64ObservableUpDownCounter // read from Stats
}

func newInstruments(m metric.Meter) (instruments, error) {
	var i instruments
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		errs = append(errs, err)
		return h
	}
	i.fetches = counter("corral.fetches", "{call}", "Fetch calls (a FetchMany's keys each one), by outcome: each call has exactly one, so they add up to the calls made.")
	i.fetchSeconds = histogram("corral.fetch.duration", "How long Fetch calls took, by outcome.")
	i.coalesced = counter("corral.coalesced", "{call}", "Fetch calls answered by a load another call in this process ran, having joined its flight: corral.fetches of outcome coalesced.")
	i.loads = counter("corral.loads", "{load}", "Loader runs started: foreground, background refreshes and fail-open.")
	i.loadErrors = counter("corral.load.errors", "{load}", "Loader runs that failed: an error other than not found, a panic, or the load timeout.")
	i.loadSeconds = histogram("corral.load.duration", "How long loader runs took.")
	i.waits = counter("corral.waits", "{wait}", "Waits for another process's load of a key (its lease).")
	i.waitSeconds = histogram("corral.wait.duration", "How long waits for another process's load took.")
	i.leasesLost = counter("corral.leases.lost", "{lease}", "Loads whose lease was revoked or expired while they ran.")
	i.commitsRejected = counter("corral.commits.rejected", "{commit}", "Loaded values not stored because their lease was gone.")
	i.breakerOpens = counter("corral.breaker.opens", "{open}", "Times the circuit breaker of a Redis node opened.")
	i.queued = counter("corral.invalidations.queued", "{invalidation}", "Deletes and Sets that could not reach Redis, queued to be applied once it answers.")
	i.replayed = counter("corral.invalidations.replayed", "{invalidation}", "Queued invalidations applied to Redis.")
	i.dropped = counter("corral.invalidations.dropped", "{invalidation}", "Invalidations given up: the queue was full, or Redis denied them.")
	i.groups = counter("corral.group_invalidations", "{invalidation}",
		"Group invalidations that reached Redis, by corral.kind: tag (one per tag of InvalidateTags or ExpireTags), clear, expire.")
	var err error
	i.breakerOpen, err = m.Int64Gauge("corral.breaker.open", metric.WithUnit("{state}"),
		metric.WithDescription("1 while the circuit breaker of a Redis node is open or half-open, else 0."))
	errs = append(errs, err)
	i.outage, err = m.Float64ObservableCounter("corral.outage.time", metric.WithUnit("s"),
		metric.WithDescription("Time the circuit breakers of Redis nodes were open (Redis could not be used), summed over nodes, the current outage included."))
	errs = append(errs, err)
	i.pending, err = m.Int64ObservableUpDownCounter("corral.invalidations.pending", metric.WithUnit("{invalidation}"),
		metric.WithDescription("Invalidations queued for Redis now, not yet applied."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return instruments{}, fmt.Errorf("corralotel: creating the instruments: %w", err)
	}
	return i, nil
}
