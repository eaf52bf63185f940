package corralprom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/byprefix"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Collector. A nil *Options means all defaults.
type Options struct {
	// LoadBuckets are the upper bounds, in seconds, of the buckets of
	// corral_load_duration_seconds, increasing. Default DefaultBuckets.
	LoadBuckets []float64

	// WaitBuckets are those of corral_wait_duration_seconds. Default
	// DefaultBuckets.
	WaitBuckets []float64

	// ConstLabels are added to every series (a service's name, say).
	ConstLabels prometheus.Labels
}

// DefaultBuckets are the default histogram buckets, in seconds: from a
// millisecond to corral's default LoadTimeout, and beyond.
var DefaultBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// ErrInvalidOptions is wrapped by New's error for buckets that do not
// increase.
var ErrInvalidOptions = errors.New("corralprom: invalid options")

// Collector collects the metrics of the Caches it observes. It is safe for
// concurrent use; create it with New.
type Collector struct {
	fetches, coalesced                 *prometheus.Desc // counted in series.outcomes, collected as constant metrics
	outage, pending                    *prometheus.Desc // read from the sources' Stats, collected as constant metrics
	loads, loadErrors                  *prometheus.CounterVec
	waits, leasesLost, commitsRejected *prometheus.CounterVec
	queued, replayed, dropped          *prometheus.CounterVec
	groups                             *prometheus.CounterVec // by kind: tag, clear, expire
	loadSeconds, waitSeconds           *prometheus.HistogramVec
	breakerOpens                       *prometheus.CounterVec
	breakerOpen                        *prometheus.GaugeVec

	series  byprefix.List[*series] // one per prefix seen
	mu      sync.Mutex             // guards sources
	sources []source               // the Caches whose Stats give their calls' outcomes, outage time and pending invalidations
}

// source is an observed Cache's Stats, under its prefix.
type source struct {
	prefix string
	stats  func() corral.Stats
	outage *maxDuration // the most Stats.OutageTime read
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

// series are the children of one prefix, resolved once.
type series struct {
	prefix                                   string
	outcomes                                 [nOutcomes]atomic.Uint64
	loads, loadErrors, waits, lost, rejected prometheus.Counter
	queued, replayed, dropped                prometheus.Counter
	loadSeconds, waitSeconds                 prometheus.Observer
}

// totals are what one prefix's Caches count, at a collection.
type totals struct {
	outcomes [nOutcomes]uint64
	stats    bool // a Cache of the prefix gave its Stats: outage and pending are known
	outage   time.Duration
	pending  int
}

// nOutcomes sizes the arrays indexed by a call's outcome
// (corral.EventKind.Outcome: EventHit to EventError; 0 unused).
const nOutcomes = corral.EventError + 1

var (
	_ corral.StatsReader   = (*Collector)(nil)
	_ prometheus.Collector = (*Collector)(nil)
)

// New returns a Collector. Register it (prometheus.Registerer.Register) and
// set it as the Observer of the Caches to watch.
func New(opts *Options) (*Collector, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	for _, b := range []*[]float64{&o.LoadBuckets, &o.WaitBuckets} {
		if *b == nil {
			*b = DefaultBuckets
		}
		if !increasing(*b) {
			return nil, fmt.Errorf("%w: buckets %v do not increase", ErrInvalidOptions, *b)
		}
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "corral", Name: name, Help: help, ConstLabels: o.ConstLabels},
			append([]string{"prefix"}, labels...))
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "corral", Name: name, Help: help,
			ConstLabels: o.ConstLabels, Buckets: buckets}, []string{"prefix"})
	}
	c := &Collector{
		fetches: prometheus.NewDesc("corral_fetches_total",
			"Fetch calls (a FetchMany's keys each one), by outcome: each call has exactly one, so they add up to the calls made.",
			[]string{"prefix", "outcome"}, o.ConstLabels),
		coalesced: prometheus.NewDesc("corral_coalesced_total",
			`Fetch calls answered by a load another call in this process ran, having joined its flight: corral_fetches_total{outcome="coalesced"}.`,
			[]string{"prefix"}, o.ConstLabels),
		outage: prometheus.NewDesc("corral_outage_seconds_total",
			"Seconds the circuit breakers of Redis nodes were open (Redis could not be used), summed over nodes, the current outage included.",
			[]string{"prefix"}, o.ConstLabels),
		pending: prometheus.NewDesc("corral_invalidations_pending",
			"Invalidations queued for Redis now, not yet applied.", []string{"prefix"}, o.ConstLabels),
		loads:           counter("loads_total", "Loader runs started: foreground, background refreshes and fail-open."),
		loadErrors:      counter("load_errors_total", "Loader runs that failed: an error other than not found, a panic, or the load timeout."),
		waits:           counter("waits_total", "Waits for another process's load of a key (its lease)."),
		leasesLost:      counter("leases_lost_total", "Loads whose lease was revoked or expired while they ran."),
		commitsRejected: counter("commits_rejected_total", "Loaded values not stored because their lease was gone."),
		queued:          counter("invalidations_queued_total", "Deletes and Sets that could not reach Redis, queued to be applied once it answers."),
		replayed:        counter("invalidations_replayed_total", "Queued invalidations applied to Redis."),
		dropped:         counter("invalidations_dropped_total", "Invalidations given up: the queue was full, or Redis denied them."),
		groups: counter("group_invalidations_total",
			"Group invalidations that reached Redis, by kind: tag (one per tag of an InvalidateTags or ExpireTags), clear, expire.", "kind"),
		loadSeconds:  histogram("load_duration_seconds", "How long loader runs took.", o.LoadBuckets),
		waitSeconds:  histogram("wait_duration_seconds", "How long waits for another process's load took.", o.WaitBuckets),
		breakerOpens: counter("breaker_opens_total", "Times the circuit breaker of a Redis node opened.", "node"),
		breakerOpen: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "corral", Name: "breaker_open",
			Help: "1 while the circuit breaker of a Redis node is open or half-open, else 0.", ConstLabels: o.ConstLabels},
			[]string{"prefix", "node"}),
	}
	return c, nil
}

// increasing reports whether b holds at least one bound, each larger than
// the one before.
func increasing(b []float64) bool {
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) {
			return false
		}
	}
	return len(b) > 0 && b[0] == b[0] // not NaN
}

// ReadStats keeps stats, an observed Cache's, to read the outcomes of its
// calls, its outage time and its pending invalidations from at each
// collection (corral.StatsReader): New calls it.
func (c *Collector) ReadStats(prefix string, stats func() corral.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, source{prefix, stats, new(maxDuration)})
}

// Observe counts e. It is what a Cache calls (corral.Observer). Outcome
// events reach it only through an Observer of the caller's own that passes
// them on: a Cache reads them from Stats instead (ReadStats).
func (c *Collector) Observe(_ context.Context, e corral.Event) {
	if e.Kind.Outcome() { // the hit path first
		c.seriesOf(e.Prefix).outcomes[e.Kind].Add(1)
		return
	}
	switch e.Kind {
	case corral.EventBreakerOpen:
		c.breakerOpens.WithLabelValues(e.Prefix, e.Node).Inc()
		c.breakerOpen.WithLabelValues(e.Prefix, e.Node).Set(1)
		return
	case corral.EventBreakerHalfOpen:
		c.breakerOpen.WithLabelValues(e.Prefix, e.Node).Set(1)
		return
	case corral.EventBreakerClosed:
		c.breakerOpen.WithLabelValues(e.Prefix, e.Node).Set(0)
		return
	}
	s := c.seriesOf(e.Prefix)
	switch e.Kind {
	case corral.EventLoadStart:
		s.loads.Inc()
	case corral.EventLoadEnd:
		s.loadSeconds.Observe(e.Duration.Seconds())
		if e.LoadFailed() {
			s.loadErrors.Inc()
		}
	case corral.EventWaitStart:
		s.waits.Inc()
	case corral.EventWaitEnd:
		s.waitSeconds.Observe(e.Duration.Seconds())
	case corral.EventLeaseLost:
		s.lost.Inc()
	case corral.EventCommitRejected:
		s.rejected.Inc()
	case corral.EventInvalidationQueued:
		s.queued.Inc()
	case corral.EventInvalidationReplayed:
		s.replayed.Inc()
	case corral.EventInvalidationDropped:
		s.dropped.Inc()
	case corral.EventTagInvalidated:
		c.groups.WithLabelValues(e.Prefix, "tag").Inc()
	case corral.EventCleared:
		c.groups.WithLabelValues(e.Prefix, "clear").Inc()
	case corral.EventExpired:
		c.groups.WithLabelValues(e.Prefix, "expire").Inc()
	}
}

// seriesOf returns prefix's series, resolving them the first time.
func (c *Collector) seriesOf(prefix string) *series { return c.series.Get(prefix, c.newSeries) }

// newSeries resolves prefix's series.
func (c *Collector) newSeries(prefix string) *series {
	s := &series{
		prefix:      prefix,
		loads:       c.loads.WithLabelValues(prefix),
		loadErrors:  c.loadErrors.WithLabelValues(prefix),
		waits:       c.waits.WithLabelValues(prefix),
		lost:        c.leasesLost.WithLabelValues(prefix),
		rejected:    c.commitsRejected.WithLabelValues(prefix),
		queued:      c.queued.WithLabelValues(prefix),
		replayed:    c.replayed.WithLabelValues(prefix),
		dropped:     c.dropped.WithLabelValues(prefix),
		loadSeconds: c.loadSeconds.WithLabelValues(prefix),
		waitSeconds: c.waitSeconds.WithLabelValues(prefix),
	}
	return s
}

func (c *Collector) vecs() []prometheus.Collector {
	return []prometheus.Collector{c.loads, c.loadErrors, c.loadSeconds,
		c.waits, c.waitSeconds, c.leasesLost, c.commitsRejected, c.queued, c.replayed, c.dropped, c.groups,
		c.breakerOpens, c.breakerOpen}
}

// Describe sends the descriptions of every metric (prometheus.Collector).
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.fetches
	ch <- c.coalesced
	ch <- c.outage
	ch <- c.pending
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
}

// Collect sends the current value of every series (prometheus.Collector).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	all := map[string]*totals{}
	total := func(prefix string) *totals {
		if all[prefix] == nil {
			all[prefix] = new(totals)
		}
		return all[prefix]
	}
	for _, e := range c.series.All() {
		s := e.Value
		t := total(s.prefix)
		for k := range s.outcomes {
			t.outcomes[k] += s.outcomes[k].Load()
		}
	}
	c.mu.Lock()
	sources := c.sources
	c.mu.Unlock()
	for _, src := range sources {
		st, t := src.stats(), total(src.prefix)
		addOutcomes(&t.outcomes, st)
		t.stats = true
		t.outage += src.outage.update(st.OutageTime)
		t.pending += st.InvalidationsPending
	}
	for prefix, t := range all {
		for k, n := range t.outcomes {
			if kind := corral.EventKind(k); kind.Outcome() {
				ch <- prometheus.MustNewConstMetric(c.fetches, prometheus.CounterValue, float64(n), prefix, kind.String())
			}
		}
		ch <- prometheus.MustNewConstMetric(c.coalesced, prometheus.CounterValue, float64(t.outcomes[corral.EventCoalesced]), prefix)
		if t.stats {
			ch <- prometheus.MustNewConstMetric(c.outage, prometheus.CounterValue, t.outage.Seconds(), prefix)
			ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(t.pending), prefix)
		}
	}
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
}

// addOutcomes adds the outcomes of calls that st counts to t, by event.
// Stats.StaleHits includes the stale-if-error answers, told apart here.
func addOutcomes(t *[nOutcomes]uint64, st corral.Stats) {
	t[corral.EventHit] += st.Hits
	t[corral.EventNearHit] += st.NearHits
	t[corral.EventStaleHit] += st.StaleHits - st.StaleIfError
	t[corral.EventStaleIfError] += st.StaleIfError
	t[corral.EventNegativeHit] += st.NegativeHits
	t[corral.EventFailureHit] += st.FailureHits
	t[corral.EventMiss] += st.Misses
	t[corral.EventFailOpen] += st.FailOpens
	t[corral.EventFailSafe] += st.FailSafeHits
	t[corral.EventCoalesced] += st.Coalesced
	t[corral.EventWaited] += st.Waited
	t[corral.EventError] += st.Errors
}
