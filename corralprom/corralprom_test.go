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
// Caches' Stats for every prefix.
func TestScrapeAfterScript(t *testing.T) {
	col, err := corralprom.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	stats := observetest.Run(t, col)
	got := scrape(t, reg)

	want := map[string]float64{
		`corral_fetches_total{outcome="hit",prefix="obs"}`:            1,
		`corral_fetches_total{outcome="near_hit",prefix="obs"}`:       0,
		`corral_fetches_total{outcome="stale_hit",prefix="obs"}`:      1,
		`corral_fetches_total{outcome="stale_if_error",prefix="obs"}`: 1,
		`corral_fetches_total{outcome="negative_hit",prefix="obs"}`:   1,
		`corral_fetches_total{outcome="failure_hit",prefix="obs"}`:    1,
		`corral_fetches_total{outcome="miss",prefix="obs"}`:           8,
		`corral_fetches_total{outcome="fail_open",prefix="obs"}`:      0,
		`corral_coalesced_total{prefix="obs"}`:                        1,
		`corral_loads_total{prefix="obs"}`:                            7,
		`corral_load_errors_total{prefix="obs"}`:                      2,
		`corral_load_duration_seconds_count{prefix="obs"}`:            7,
		`corral_waits_total{prefix="obs"}`:                            1,
		`corral_wait_duration_seconds_count{prefix="obs"}`:            1,
		`corral_leases_lost_total{prefix="obs"}`:                      1,
		`corral_commits_rejected_total{prefix="obs"}`:                 1,
	}
	for prefix, st := range stats {
		for series, n := range fromStats(prefix, st) {
			if prefix == observetest.Prefix && want[series] != n {
				t.Fatalf("%s: the script's Stats say %v, the test %v", series, n, want[series])
			}
			want[series] = n
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

// fromStats is what the counters of prefix must be, from its Caches'
// Stats.
func fromStats(prefix string, st corral.Stats) map[string]float64 {
	m := map[string]float64{}
	for kind, n := range observetest.Events(st) {
		if kind.Outcome() {
			m[fmt.Sprintf(`corral_fetches_total{outcome=%q,prefix=%q}`, kind.String(), prefix)] = float64(n)
		}
	}
	for name, n := range map[string]uint64{
		"corral_coalesced_total": st.Coalesced, "corral_loads_total": st.Loads, "corral_load_errors_total": st.LoadErrors,
		"corral_load_duration_seconds_count": st.Loads, "corral_waits_total": st.Waits,
		"corral_wait_duration_seconds_count": st.Waits, "corral_leases_lost_total": st.LeasesLost,
		"corral_commits_rejected_total": st.CommitsRejected,
	} {
		m[fmt.Sprintf(`%s{prefix=%q}`, name, prefix)] = float64(n)
	}
	return m
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
	if len(outcomes) == 0 || outcomes[len(outcomes)-1] != corral.EventFailSafe {
		t.Errorf("outcomes %v; want EventHit to EventFailSafe", outcomes)
	}
}
