package corralprom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralprom"
	"github.com/corralhq/corral/internal/observetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestScrapeAfterScript runs observetest's scripted calls with a Collector
// registered in a pedantic registry, scrapes it, and checks the counts:
// exactly the script's for its deterministic part, and equal to the
// Caches' Stats for every prefix. It scrapes in the middle of the outage
// too (duringOutage).
func TestScrapeAfterScript(t *testing.T) {
	col, err := corralprom.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	stats := observetest.RunDuring(t, col, func(stats func() corral.Stats) { duringOutage(t, reg, stats) })
	got := scrape(t, reg)

	want := map[string]float64{
		`corral_fetches_total{outcome="hit",prefix="obs"}`:             2,
		`corral_fetches_total{outcome="near_hit",prefix="obs"}`:        0,
		`corral_fetches_total{outcome="stale_hit",prefix="obs"}`:       1,
		`corral_fetches_total{outcome="stale_if_error",prefix="obs"}`:  1,
		`corral_fetches_total{outcome="negative_hit",prefix="obs"}`:    1,
		`corral_fetches_total{outcome="failure_hit",prefix="obs"}`:     1,
		`corral_fetches_total{outcome="miss",prefix="obs"}`:            9,
		`corral_fetches_total{outcome="coalesced",prefix="obs"}`:       observetest.Stampede,
		`corral_fetches_total{outcome="waited",prefix="obs"}`:          observetest.Stampede,
		`corral_fetches_total{outcome="error",prefix="obs"}`:           6,
		`corral_fetches_total{outcome="fail_open",prefix="obs"}`:       0,
		`corral_coalesced_total{prefix="obs"}`:                         observetest.Stampede,
		`corral_loads_total{prefix="obs"}`:                             10,
		`corral_load_errors_total{prefix="obs"}`:                       2,
		`corral_load_duration_seconds_count{prefix="obs"}`:             10,
		`corral_waits_total{prefix="obs"}`:                             1,
		`corral_wait_duration_seconds_count{prefix="obs"}`:             1,
		`corral_leases_lost_total{prefix="obs"}`:                       1,
		`corral_commits_rejected_total{prefix="obs"}`:                  1,
		`corral_group_invalidations_total{kind="tag",prefix="obs"}`:    2,
		`corral_group_invalidations_total{kind="clear",prefix="obs"}`:  1,
		`corral_group_invalidations_total{kind="expire",prefix="obs"}`: 1,

		`corral_fetches_total{outcome="fail_open",prefix="obs-outage"}`: 1,
		`corral_fetches_total{outcome="fail_safe",prefix="obs-outage"}`: 1,
		`corral_fetches_total{outcome="miss",prefix="obs-outage"}`:      0,
		`corral_fetches_total{outcome="coalesced",prefix="obs-outage"}`: 1,
		`corral_invalidations_queued_total{prefix="obs-outage"}`:        1,
		`corral_invalidations_replayed_total{prefix="obs-outage"}`:      1,
		`corral_invalidations_dropped_total{prefix="obs-outage"}`:       1,
		`corral_invalidations_pending{prefix="obs-outage"}`:             0,
	}
	for prefix, st := range stats {
		for series, n := range fromStats(prefix, st) {
			// obs's series are all listed (those not listed are 0);
			// obs-outage's listed ones are exact.
			w, listed := want[series]
			if (prefix == observetest.Prefix || listed) && w != n {
				t.Fatalf("%s: the script's Stats say %v, the test %v", series, n, w)
			}
			want[series] = n
		}
		if st.OutageTime <= 0 && prefix != observetest.Prefix && prefix != observetest.PrefixNear {
			t.Errorf("%s: no outage time in its Stats", prefix)
		}
	}
	for series, n := range want {
		if v, ok := got[series]; !ok || v != n {
			t.Errorf("%s = %v (scraped: %v); want %v", series, v, ok, n)
		}
	}
	// The breakers of the nodes that went down opened, as often as Stats
	// say, and are closed now.
	for prefix, st := range stats {
		opens, open := byNode(got, "corral_breaker_opens_total", prefix), byNode(got, "corral_breaker_open", prefix)
		if opens != float64(st.BreakerOpens) || open != 0 {
			t.Errorf("%s: breaker opens %v, open now %v; want %d and 0", prefix, opens, open, st.BreakerOpens)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", dump(got))
	}

	problems, err := testutil.CollectAndLint(col)
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %+v", err, problems)
	}
}

// fromStats is what the counters and the pending gauge of prefix must be,
// from its Caches' Stats.
func fromStats(prefix string, st corral.Stats) map[string]float64 {
	m := map[string]float64{
		fmt.Sprintf(`corral_outage_seconds_total{prefix=%q}`, prefix):  st.OutageTime.Seconds(),
		fmt.Sprintf(`corral_invalidations_pending{prefix=%q}`, prefix): float64(st.InvalidationsPending),
	}
	for kind, n := range observetest.Events(st) {
		if kind.Outcome() {
			m[fmt.Sprintf(`corral_fetches_total{outcome=%q,prefix=%q}`, kind.String(), prefix)] = float64(n)
		}
	}
	for name, n := range map[string]uint64{
		"corral_coalesced_total": st.Coalesced, "corral_loads_total": st.Loads, "corral_load_errors_total": st.LoadErrors,
		"corral_load_duration_seconds_count": st.Loads, "corral_waits_total": st.Waits,
		"corral_wait_duration_seconds_count": st.Waits, "corral_leases_lost_total": st.LeasesLost,
		"corral_commits_rejected_total": st.CommitsRejected, "corral_invalidations_queued_total": st.InvalidationsQueued,
		"corral_invalidations_replayed_total": st.InvalidationsReplayed, "corral_invalidations_dropped_total": st.InvalidationsDropped,
	} {
		m[fmt.Sprintf(`%s{prefix=%q}`, name, prefix)] = float64(n)
	}
	for kind, n := range map[string]uint64{"tag": st.TagInvalidations, "clear": st.Clears, "expire": st.Expires} {
		if n > 0 { // a kind's series exists once one was counted
			m[fmt.Sprintf(`corral_group_invalidations_total{kind=%q,prefix=%q}`, kind, prefix)] = float64(n)
		}
	}
	return m
}

// duringOutage scrapes reg in the middle of observetest's outage, and
// checks the series of its prefix against stats, its Cache's: the pending
// invalidation, the open breaker, and the outage time so far, between the
// Stats read before the scrape and those read after.
func duringOutage(t *testing.T, reg prometheus.Gatherer, stats func() corral.Stats) {
	before := stats()
	got := scrape(t, reg)
	after := stats()
	prefix := observetest.PrefixOutage
	outage := fmt.Sprintf(`corral_outage_seconds_total{prefix=%q}`, prefix)
	if v := got[outage]; !(v > 0 && before.OutageTime.Seconds() <= v && v <= after.OutageTime.Seconds()) {
		t.Errorf("during the outage, %s = %v; want between the Stats' before and after the scrape: %v, %v", outage, v, before.OutageTime, after.OutageTime)
	}
	for series, n := range fromStats(prefix, after) {
		if v, ok := got[series]; series != outage && (!ok || v != n) {
			t.Errorf("during the outage, %s = %v (scraped: %v); Stats say %v", series, v, ok, n)
		}
	}
	if before.InvalidationsPending != 1 || after.InvalidationsPending != 1 {
		t.Errorf("the Stats say %d, %d invalidations pending; want 1", before.InvalidationsPending, after.InvalidationsPending)
	}
	if open := byNode(got, "corral_breaker_open", prefix); open != 1 {
		t.Errorf("during the outage, %v breakers of %s open; want 1", open, prefix)
	}
	if t.Failed() {
		t.Logf("scraped during the outage:\n%s", dump(got))
	}
}

// byNode is the sum of the series of name{node,prefix} for prefix.
func byNode(got map[string]float64, name, prefix string) float64 {
	sum := 0.0
	for series, v := range got {
		if strings.HasPrefix(series, name+"{node=") && strings.HasSuffix(series, fmt.Sprintf(",prefix=%q}", prefix)) {
			sum += v
		}
	}
	return sum
}

// scrape gathers reg: counters and gauges by series, histograms as their
// _count and _sum.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			series := "{" + strings.Join(labels, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				got[mf.GetName()+series] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				got[mf.GetName()+series] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				got[mf.GetName()+"_count"+series] = float64(h.GetSampleCount())
				got[mf.GetName()+"_sum"+series] = h.GetSampleSum()
				if h.GetSampleCount() > 0 && !(h.GetSampleSum() > 0) {
					t.Errorf("%s%s: %d samples, sum %v", mf.GetName(), series, h.GetSampleCount(), h.GetSampleSum())
				}
			}
		}
	}
	return got
}

func dump(m map[string]float64) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s %v", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func TestNewRejectsBuckets(t *testing.T) {
	for _, b := range [][]float64{{}, {1, 1}, {2, 1}, {math.NaN()}} {
		if _, err := corralprom.New(&corralprom.Options{WaitBuckets: b}); !errors.Is(err, corralprom.ErrInvalidOptions) {
			t.Errorf("New with buckets %v: %v; want ErrInvalidOptions", b, err)
		}
	}
	if _, err := corralprom.New(&corralprom.Options{LoadBuckets: []float64{0.1, 1}, ConstLabels: prometheus.Labels{"service": "shop"}}); err != nil {
		t.Fatal(err)
	}
}

// TestEveryOutcome: each outcome of a call that an Observer of the
// caller's own passes on is a series of corral_fetches_total, under its
// name; no kind of event, known or not, makes Observe panic.
func TestEveryOutcome(t *testing.T) {
	col, err := corralprom.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	var outcomes []corral.EventKind
	for k := range corral.EventKind(255) {
		col.Observe(context.Background(), corral.Event{Kind: k, Prefix: "every", Key: "k", Node: "n", Duration: time.Millisecond})
		if k.Outcome() {
			outcomes = append(outcomes, k)
		}
	}
	got := scrape(t, reg)
	for _, k := range outcomes {
		if series := fmt.Sprintf(`corral_fetches_total{outcome=%q,prefix="every"}`, k); got[series] != 1 {
			t.Errorf("%s = %v; want 1", series, got[series])
		}
	}
	if len(outcomes) == 0 || outcomes[len(outcomes)-1] != corral.EventError {
		t.Errorf("outcomes %v; want EventHit to EventError", outcomes)
	}
	if got[`corral_coalesced_total{prefix="every"}`] != 1 {
		t.Errorf(`corral_coalesced_total{prefix="every"} = %v; want 1, as {outcome="coalesced"}`, got[`corral_coalesced_total{prefix="every"}`])
	}
}

// TestOutageNeverGoesDown: corral_outage_seconds_total is a counter, though
// a Cache's Stats.OutageTime may read short as a breaker closes; each
// Cache's series sum under its prefix, and pending invalidations are a
// gauge that goes down as they are applied.
func TestOutageNeverGoesDown(t *testing.T) {
	col, err := corralprom.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	reads := []corral.Stats{
		{OutageTime: 3 * time.Second, InvalidationsPending: 2},
		{OutageTime: time.Second, InvalidationsPending: 1}, // the period that just closed in neither read
		{OutageTime: 4 * time.Second},
	}
	var n int
	col.ReadStats("p", func() corral.Stats { return reads[n] })
	col.ReadStats("p", func() corral.Stats { return corral.Stats{OutageTime: time.Second, InvalidationsPending: 1} })
	for n = range reads {
		got := scrape(t, reg)
		outage, pending := []float64{4, 4, 5}[n], []float64{3, 2, 1}[n]
		if got[`corral_outage_seconds_total{prefix="p"}`] != outage || got[`corral_invalidations_pending{prefix="p"}`] != pending {
			t.Errorf("scrape %d:\n%s\nwant outage %v s, %v pending", n, dump(got), outage, pending)
		}
	}
}
