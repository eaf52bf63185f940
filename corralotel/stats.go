package corralotel

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral"
	"go.opentelemetry.io/otel/metric"
)

// What only Stats knows. A Cache tells no event of the time its breakers
// were open (Stats.OutageTime), and the events of its queue do not add up
// to the invalidations pending (Stats.InvalidationsPending): a second
// invalidation of a key queued already is counted and told, but not
// queued again. So the observable instruments corral.outage.time and
// corral.invalidations.pending are read from each Cache's Stats at each
// collection, through the Observer's StatsReader.

// source is an observed Cache's Stats, under its prefix (StatsReader).
type source struct {
	prefix string
	stats  func() corral.Stats
	outage *maxDuration // the most Stats.OutageTime read
}

// StatsReader returns a corral.StatsReader that gives o the Stats of each
// Cache it is set on, for the two metrics that only Stats knows:
// corral.outage.time and corral.invalidations.pending. Set it beside o:
//
//	corral.New(rdb, &corral.Options{Observer: corral.MultiObserver(obs, obs.StatsReader())})
//
// o itself cannot be a StatsReader: a Cache tells a StatsReader no outcome
// of a call, and o needs each one for its call's span and metrics. The
// StatsReader's own Observe does nothing: o, beside it, is told the events.
// Without it, those two metrics have no data points. o keeps each Cache's
// Stats method for as long as it lives: a closed Cache's outage time and
// pending invalidations (those Close could not apply) stay in the totals.
func (o *Observer) StatsReader() corral.StatsReader { return statsReader{o} }

// statsReader is an Observer's corral.StatsReader (Observer.StatsReader).
type statsReader struct{ o *Observer }

func (statsReader) Observe(context.Context, corral.Event) {}

// ReadStats keeps stats, an observed Cache's, to read at each collection
// (corral.StatsReader): corral.New calls it.
func (r statsReader) ReadStats(prefix string, stats func() corral.Stats) {
	r.o.mu.Lock()
	defer r.o.mu.Unlock()
	r.o.sources = append(r.o.sources, source{prefix, stats, new(maxDuration)})
}

// observeStats observes what the Caches' Stats hold (the callback of the
// observable instruments), summed by prefix.
func (o *Observer) observeStats(_ context.Context, obs metric.Observer) error {
	o.mu.Lock()
	sources := o.sources
	o.mu.Unlock()
	type totals struct {
		outage  time.Duration
		pending int64
	}
	all := map[string]*totals{}
	for _, src := range sources {
		t := all[src.prefix]
		if t == nil {
			t = new(totals)
			all[src.prefix] = t
		}
		st := src.stats()
		t.outage += src.outage.update(st.OutageTime)
		t.pending += int64(st.InvalidationsPending)
	}
	for prefix, t := range all {
		p := o.prefixed(prefix)
		obs.ObserveFloat64(o.m.outage, t.outage.Seconds(), p.observe...)
		obs.ObserveInt64(o.m.pending, t.pending, p.observe...)
	}
	return nil
}

// maxDuration is the largest of the durations it was given. A Cache's
// Stats.OutageTime may read short as a breaker closes (the closed periods
// and the open ones are two reads: the period ending can be in neither),
// and a counter must not go down.
type maxDuration struct{ ns atomic.Int64 }

// update returns the largest of d and those given before.
func (m *maxDuration) update(d time.Duration) time.Duration {
	for {
		old := m.ns.Load()
		if int64(d) <= old {
			return time.Duration(old)
		}
		if m.ns.CompareAndSwap(old, int64(d)) {
			return d
		}
	}
}
