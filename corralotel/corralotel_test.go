package corralotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralotel"
	"github.com/corralhq/corral/internal/observetest"
	"github.com/corralhq/corral/internal/redistest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// telemetry is an Observer on the SDK with in-memory exporters.
type telemetry struct {
	obs    *corralotel.Observer
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
}

func newTelemetry(t *testing.T, recordKeys bool) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		tel.tp.Shutdown(context.Background())
		mp.Shutdown(context.Background())
	})
	var err error
	tel.obs, err = corralotel.New(&corralotel.Options{TracerProvider: tel.tp, MeterProvider: mp, RecordKeys: recordKeys})
	if err != nil {
		t.Fatal(err)
	}
	return tel
}

// metrics collects the metrics: each data point's value (a histogram's
// count) by instrument name and attributes ("name{k=v,...}").
func (tel *telemetry) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	name := func(m metricdata.Metrics, set attribute.Set) string {
		return m.Name + "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[name(m, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					got[name(m, p.Attributes)] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[name(m, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[name(m, p.Attributes)] = float64(p.Count)
				}
			default:
				t.Errorf("metric %s of type %T", m.Name, m.Data)
			}
		}
	}
	return got
}

// many is how many of the calls of prefix with outcome kind (0: any) are
// keys of the script's FetchMany calls, which no span of their own times.
func many(prefix string, kind corral.EventKind) uint64 {
	if prefix != observetest.Prefix {
		return 0
	}
	if kind != 0 {
		return observetest.ManyOutcomes[kind]
	}
	var n uint64
	for _, k := range observetest.ManyOutcomes {
		n += k
	}
	return n
}

// fromStats is what the metrics of prefix must be, from its Caches' Stats
// (histograms: their counts); those that are 0 may have no data point.
// corral.outage.time is left out: it grows during an outage.
func fromStats(prefix string, st corral.Stats) map[string]float64 {
	p := fmt.Sprintf("corral.prefix=%s", prefix)
	m := map[string]float64{"corral.invalidations.pending{" + p + "}": float64(st.InvalidationsPending)}
	for name, n := range map[string]uint64{
		"corral.coalesced": st.Coalesced, "corral.loads": st.Loads, "corral.load.errors": st.LoadErrors,
		"corral.load.duration": st.Loads, "corral.waits": st.Waits, "corral.wait.duration": st.Waits,
		"corral.leases.lost": st.LeasesLost, "corral.commits.rejected": st.CommitsRejected,
		"corral.invalidations.queued": st.InvalidationsQueued, "corral.invalidations.replayed": st.InvalidationsReplayed,
		"corral.invalidations.dropped": st.InvalidationsDropped,
	} {
		m[name+"{"+p+"}"] = float64(n)
	}
	for kind, n := range observetest.Events(st) {
		if kind.Outcome() {
			m[fmt.Sprintf("corral.fetches{corral.outcome=%s,%s}", kind, p)] = float64(n)
			m[fmt.Sprintf("corral.fetch.duration{corral.outcome=%s,%s}", kind, p)] = float64(n - many(prefix, kind)) // each Fetch once
		}
	}
	return m
}

// duringOutage collects the metrics in the middle of observetest's outage,
// and checks those of its prefix against stats, its Cache's: the pending
// invalidation, the open breaker, and the outage time so far, between the
// Stats read before the collection and those read after.
func (tel *telemetry) duringOutage(t *testing.T, stats func() corral.Stats) {
	before := stats()
	metrics := tel.metrics(t)
	after := stats()
	prefix := observetest.PrefixOutage
	outage := fmt.Sprintf("corral.outage.time{corral.prefix=%s}", prefix)
	if v := metrics[outage]; !(v > 0 && before.OutageTime.Seconds() <= v && v <= after.OutageTime.Seconds()) {
		t.Errorf("during the outage, %s = %v; want between the Stats' before and after the collection: %v, %v", outage, v, before.OutageTime, after.OutageTime)
	}
	for m, k := range fromStats(prefix, after) {
		if v, ok := metrics[m]; (ok || k != 0) && v != k {
			t.Errorf("during the outage, %s = %v; Stats say %v", m, v, k)
		}
	}
	if before.InvalidationsPending != 1 || after.InvalidationsPending != 1 {
		t.Errorf("the Stats say %d, %d invalidations pending; want 1", before.InvalidationsPending, after.InvalidationsPending)
	}
	if open := byNode(metrics, "corral.breaker.open", prefix); open != 1 {
		t.Errorf("during the outage, %v breakers of %s open; want 1", open, prefix)
	}
	if t.Failed() {
		t.Logf("metrics during the outage: %v", metrics)
	}
}

// byNode is the sum of the data points of name{corral.node,corral.prefix}
// for prefix.
func byNode(metrics map[string]float64, name, prefix string) float64 {
	sum := 0.0
	for m, v := range metrics {
		if strings.HasPrefix(m, name+"{corral.node=") && strings.HasSuffix(m, ",corral.prefix="+prefix+"}") {
			sum += v
		}
	}
	return sum
}

// attr returns span s's attribute k as a string ("" when absent).
func attr(s sdktrace.ReadOnlySpan, k string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestAfterScript runs observetest's scripted calls with an Observer on the
// SDK (and its StatsReader beside it) and checks the spans and the metrics
// against the Caches' Stats (which the script checks against its exact
// counts), in the middle of the outage too (duringOutage).
func TestAfterScript(t *testing.T) {
	tel := newTelemetry(t, false)
	stats := observetest.RunDuring(t, corral.MultiObserver(tel.obs, tel.obs.StatsReader()),
		func(stats func() corral.Stats) { tel.duringOutage(t, stats) })
	ended := tel.spans.Ended()
	fetches := map[trace.SpanID]bool{}
	type count struct{ prefix, what string }
	n := map[count]uint64{}
	for _, s := range ended {
		if s.Name() == "corral.fetch" {
			fetches[s.SpanContext().SpanID()] = true
		}
	}
	for _, s := range ended {
		prefix := attr(s, "corral.prefix")
		n[count{prefix, s.Name()}]++
		switch s.Name() {
		case "corral.fetch":
			n[count{prefix, "outcome " + attr(s, "corral.outcome")}]++
			if attr(s, "corral.coalesced") == "true" {
				n[count{prefix, "coalesced"}]++
			}
			for _, e := range s.Events() {
				n[count{prefix, e.Name}]++
			}
			if attr(s, "corral.key") != "" {
				t.Errorf("span %s has the key %q without RecordKeys", s.Name(), attr(s, "corral.key"))
			}
		case "corral.load", "corral.wait":
			if s.Status().Code == codes.Error {
				n[count{prefix, s.Name() + " failed"}]++
			}
			if !fetches[s.Parent().SpanID()] {
				n[count{prefix, s.Name() + " outside a call"}]++ // a FetchMany's load, in the caller's context
			}
		default:
			t.Errorf("unexpected span %s", s.Name())
		}
	}
	metrics := tel.metrics(t)
	for prefix, st := range stats {
		want := map[count]uint64{
			{prefix, "corral.load"}: st.Loads, {prefix, "corral.load failed"}: st.LoadErrors,
			{prefix, "corral.wait"}: st.Waits, {prefix, "coalesced"}: st.Coalesced,
			{prefix, "corral.lease_lost"}: st.LeasesLost, {prefix, "corral.commit_rejected"}: st.CommitsRejected,
			{prefix, "corral.load outside a call"}: many(prefix, corral.EventMiss), {prefix, "corral.wait outside a call"}: 0,
		}
		if prefix == observetest.Prefix || prefix == observetest.PrefixOutage {
			want[count{prefix, "corral.fetch"}] = st.Calls() - many(prefix, 0) // every Fetch call, an error too
		}
		for kind, k := range observetest.Events(st) {
			if kind.Outcome() {
				want[count{prefix, "outcome " + kind.String()}] = k - many(prefix, kind)
			}
		}
		for c, k := range want {
			if n[c] != k {
				t.Errorf("%s: %d %s; Stats say %d", c.prefix, n[c], c.what, k)
			}
		}
		for m, k := range fromStats(prefix, st) {
			if v, ok := metrics[m]; (ok || k != 0) && v != k {
				t.Errorf("%s = %v; Stats say %v", m, v, k)
			}
		}
		if p := fmt.Sprintf("{corral.prefix=%s}", prefix); metrics["corral.outage.time"+p] != st.OutageTime.Seconds() {
			t.Errorf("corral.outage.time%s = %v; Stats say %v", p, metrics["corral.outage.time"+p], st.OutageTime)
		}
	}
	for prefix, st := range stats {
		opens, open := byNode(metrics, "corral.breaker.opens", prefix), byNode(metrics, "corral.breaker.open", prefix)
		if opens != float64(st.BreakerOpens) || open != 0 {
			t.Errorf("%s: breaker opens %v, open now %v; want %d and 0", prefix, opens, open, st.BreakerOpens)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("metrics: %v", metrics)
	}
}

// TestSpansNest: a call's span is a child of the caller's, its load's a
// child of it, and the loader's context holds the load's span. A hit is
// one span. Errors set the error status; ErrNotFound does not. RecordKeys
// adds the key.
func TestSpansNest(t *testing.T) {
	tel := newTelemetry(t, true)
	srv := redistest.Start(t)
	c, err := corral.New(srv.Client(), &corral.Options{Prefix: "nest", Observer: tel.obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, root := tel.tp.Tracer("test").Start(context.Background(), "request")
	var inLoader trace.SpanContext
	for range 2 {
		if _, err := c.Fetch(ctx, "k", time.Minute, func(ctx context.Context) ([]byte, error) {
			inLoader = trace.SpanContextFromContext(ctx)
			return []byte("v"), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("boom")
	if _, err := c.Fetch(ctx, "bad", time.Minute, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "nf", time.Minute, func(context.Context) ([]byte, error) { return nil, corral.ErrNotFound }); !errors.Is(err, corral.ErrNotFound) {
		t.Fatal(err)
	}
	root.End()

	type span struct{ name, parent, outcome, key, status string }
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range tel.spans.Ended() {
		byID[s.SpanContext().SpanID()] = s
	}
	var got []span
	for _, s := range tel.spans.Ended() {
		parent := ""
		if p, ok := byID[s.Parent().SpanID()]; ok {
			parent = p.Name()
		}
		got = append(got, span{s.Name(), parent, attr(s, "corral.outcome"), attr(s, "corral.key"), s.Status().Code.String()})
		if s.Name() == "corral.load" && attr(s, "corral.key") == "k" && !s.SpanContext().Equal(inLoader) {
			t.Errorf("the loader's context holds span %v; want the load's, %v", inLoader, s.SpanContext())
		}
	}
	want := []span{
		{"corral.load", "corral.fetch", "", "k", "Unset"},
		{"corral.fetch", "request", "miss", "k", "Unset"},
		{"corral.fetch", "request", "hit", "k", "Unset"},
		{"corral.load", "corral.fetch", "", "bad", "Error"},
		{"corral.fetch", "request", "miss", "bad", "Error"},
		{"corral.load", "corral.fetch", "", "nf", "Unset"},
		{"corral.fetch", "request", "miss", "nf", "Unset"},
		{"request", "", "", "", "Unset"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("spans (name, parent, outcome, key, status):\n%v\nwant\n%v", got, want)
	}
}

// TestEveryOutcome: each outcome of a call is counted in corral.fetches
// and timed in corral.fetch.duration under its name, and is the
// corral.outcome of the call's span; no kind of event, known or not, makes
// Observe panic.
func TestEveryOutcome(t *testing.T) {
	tel := newTelemetry(t, false)
	ctx := context.Background()
	var outcomes []corral.EventKind
	for k := range corral.EventKind(255) {
		if k == corral.EventFetchStart || k == corral.EventLoadStart {
			continue // they open scopes: Start's
		}
		if !k.Outcome() {
			tel.obs.Observe(ctx, corral.Event{Kind: k, Prefix: "every", Key: "k", Node: "n", Duration: time.Millisecond})
			continue
		}
		outcomes = append(outcomes, k)
		call := tel.obs.Start(ctx, corral.Event{Kind: corral.EventFetchStart, Prefix: "every", Key: "k"})
		tel.obs.Observe(call, corral.Event{Kind: k, Prefix: "every", Key: "k"})
		tel.obs.Observe(call, corral.Event{Kind: corral.EventFetchEnd, Prefix: "every", Key: "k", Duration: time.Millisecond})
	}
	metrics := tel.metrics(t)
	spans := map[string]int{}
	for _, s := range tel.spans.Ended() {
		spans[attr(s, "corral.outcome")]++
	}
	for _, k := range outcomes {
		for _, m := range []string{"corral.fetches", "corral.fetch.duration"} {
			if name := fmt.Sprintf("%s{corral.outcome=%s,corral.prefix=every}", m, k); metrics[name] != 1 {
				t.Errorf("%s = %v; want 1", name, metrics[name])
			}
		}
		if spans[k.String()] != 1 {
			t.Errorf("%d spans with corral.outcome %s; want 1", spans[k.String()], k)
		}
	}
	if len(outcomes) == 0 || outcomes[len(outcomes)-1] != corral.EventError {
		t.Errorf("outcomes %v; want EventHit to EventError", outcomes)
	}
	if metrics["corral.coalesced{corral.prefix=every}"] != 1 {
		t.Errorf("corral.coalesced = %v; want 1, as corral.fetches of coalesced", metrics["corral.coalesced{corral.prefix=every}"])
	}
}

// TestOutageNeverGoesDown: corral.outage.time is a counter, though a
// Cache's Stats.OutageTime may read short as a breaker closes; each Cache
// its StatsReader was given sums under its prefix, and pending
// invalidations go down as they are applied.
func TestOutageNeverGoesDown(t *testing.T) {
	tel := newTelemetry(t, false)
	reads := []corral.Stats{
		{OutageTime: 3 * time.Second, InvalidationsPending: 2},
		{OutageTime: time.Second, InvalidationsPending: 1}, // the period that just closed in neither read
		{OutageTime: 4 * time.Second},
	}
	var n int
	r := tel.obs.StatsReader()
	r.ReadStats("p", func() corral.Stats { return reads[n] })
	r.ReadStats("p", func() corral.Stats { return corral.Stats{OutageTime: time.Second, InvalidationsPending: 1} })
	for n = range reads {
		got := tel.metrics(t)
		outage, pending := []float64{4, 4, 5}[n], []float64{3, 2, 1}[n]
		if got["corral.outage.time{corral.prefix=p}"] != outage || got["corral.invalidations.pending{corral.prefix=p}"] != pending {
			t.Errorf("collection %d: %v; want outage %v s, %v pending", n, got, outage, pending)
		}
	}
}
