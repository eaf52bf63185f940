package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture is a small run's results, as run() builds them: a burst with
// corral, a not-built system and a peer, and the hit path.
func fixture(t *testing.T) *Results {
	t.Helper()
	rec := func(ms ...int) *recorder {
		r := newRecorder()
		for _, m := range ms {
			r.record(time.Duration(m)*time.Millisecond, nil)
		}
		return r
	}
	sc := scenarios(false)[0] // cold-stampede-20ms
	var corralRow, naiveRow SystemResult
	corralRow.System, naiveRow.System = "corral", "naive"
	summarize(&corralRow, []*trial{
		{loads: 1, peak: 1, rec: rec(21, 22, 23), commands: map[string]int64{"evalsha": 10, "time": 10}, commandTotal: 20},
		{loads: 1, peak: 1, rec: rec(21, 22, 30), commands: map[string]int64{"evalsha": 12, "time": 12}, commandTotal: 24},
	}, sc)
	summarize(&naiveRow, []*trial{
		{loads: 3, peak: 3, rec: rec(20, 20, 20), commands: map[string]int64{"get": 3, "set": 3}, commandTotal: 6},
		{loads: 3, peak: 3, rec: rec(20, 20, 20), commands: map[string]int64{"get": 3, "set": 3}, commandTotal: 6},
	}, sc)
	f := func(v float64) *float64 { return &v }
	return &Results{
		Machine: "2 x test CPU", Redis: "7.0.15", Command: "make bench", Go: "go1.26", Started: "2026-01-01T00:00:00Z",
		Label: "development run",
		Scenarios: []ScenarioResult{
			{
				Name: sc.Name, Description: sc.Description, Setup: sc.Setup(), Rounds: 2,
				Results: []SystemResult{corralRow, {System: "corral-near", Status: notBuilt}, naiveRow},
			},
			{
				Name: "hit-path", RatioVsRawGet: f(1.1), Rounds: 3,
				Results: []SystemResult{
					{System: rawGet, NsPerOp: f(30000), AllocsPerOp: f(7)},
					{System: "corral", NsPerOp: f(33000), AllocsPerOp: f(20)},
					{System: "corral-near", Status: notBuilt},
					{System: "sturdyc", NsPerOp: f(300), AllocsPerOp: f(4)},
				},
			},
		},
	}
}

// TestResultsShape checks results.json against the shape issue 13 gives.
func TestResultsShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	if err := writeJSON(path, fixture(t)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine   string `json:"machine"`
		Redis     string `json:"redis"`
		Command   string `json:"command"`
		Scenarios []struct {
			Name          string           `json:"name"`
			RatioVsRawGet *float64         `json:"ratio_vs_raw_get"`
			Results       []map[string]any `json:"results"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Machine == "" || doc.Redis != "7.0.15" || doc.Command != "make bench" {
		t.Errorf("provenance: %+v", doc)
	}
	burst := doc.Scenarios[0].Results
	for _, k := range []string{"system", "origin_loads", "peak_origin_concurrency", "latency_ms", "redis_commands", "errors"} {
		if _, ok := burst[0][k]; !ok {
			t.Errorf("burst row has no %q: %v", k, burst[0])
		}
	}
	lat := burst[0]["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p99", "max"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_ms has no %q", k)
		}
	}
	if burst[0]["origin_loads"].(float64) != 1 || burst[0]["redis_commands"].(float64) != 22 || burst[0]["errors"].(float64) != 0 {
		t.Errorf("corral row: %v", burst[0])
	}
	if lat["max"].(float64) != 30 {
		t.Errorf("max over rounds: %v", lat["max"])
	}
	if burst[1]["status"] != notBuilt || burst[1]["origin_loads"] != nil {
		t.Errorf("a system not built yet must say so and carry no numbers: %v", burst[1])
	}
	hit := doc.Scenarios[1]
	if hit.RatioVsRawGet == nil || *hit.RatioVsRawGet != 1.1 {
		t.Errorf("ratio_vs_raw_get: %v", hit.RatioVsRawGet)
	}
	for _, k := range []string{"ns_per_op", "allocs_per_op"} {
		if _, ok := hit.Results[1][k]; !ok {
			t.Errorf("hit row has no %q", k)
		}
	}
}

// TestMarkdown checks that BENCHMARKS.md shows provenance, targets, every
// system (those not built yet included) and the peers' wins with a reason.
func TestMarkdown(t *testing.T) {
	md := markdown(fixture(t), map[string][]string{"cold-stampede-20ms": {"bench/charts/cold-stampede-20ms-p99.png"}})
	for _, want := range []string{
		"**development run.**",
		"`make bench`", "redis-server 7.0.15", "2 x test CPU",
		"| corral: exactly 1 origin load per key in every cold-stampede, big-value and redis-stall round (hard) | met in all 1 scenarios run |",
		"corral's Redis hit at most 1.1x a raw GET | met: 1.10x",
		"corral-near's hit at most 150 ns, with no allocation | not built yet",
		"| corral | 1 (1, 1) | 1 |",
		"| corral-near | not built yet |",
		"| naive | 3 (3, 3) | 3 |",
		"![cold-stampede-20ms](bench/charts/cold-stampede-20ms-p99.png)",
		"**naive** has a lower p99",
		"**naive** costs Redis fewer commands (6 against corral's 22)",
		"**sturdyc** hits faster (300 ns/op against corral's 33000)",
		"commandstats",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("BENCHMARKS.md lacks %q", want)
		}
	}
	if strings.Contains(md, "**naive** makes fewer origin loads") {
		t.Error("naive made more loads, not fewer")
	}
}

func TestTargetsMissed(t *testing.T) {
	res := fixture(t)
	r := &res.Scenarios[0].Results[0]
	r.OriginLoadsPerRound = []int64{1, 2}
	two := int64(2)
	r.OriginLoads = &two
	got := targets(res)
	if !strings.Contains(got[0][1], "**missed** in cold-stampede-20ms (loads per round 1, 2)") {
		t.Errorf("hard target: %q", got[0][1])
	}
}

func TestCommandStats(t *testing.T) {
	before := parseCommandStats("# Commandstats\r\ncmdstat_get:calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=1,usec=1\r\n")
	after := parseCommandStats("# Commandstats\r\ncmdstat_get:calls=5,usec=9\r\ncmdstat_evalsha:calls=2,usec=9\r\ncmdstat_info:calls=3,usec=1\r\ncmdstat_client|setinfo:calls=4,usec=1\r\ncmdstat_hello:calls=2,usec=1\r\n")
	by, total := after.sub(before, notCounted)
	if total != 4 || by["get"] != 2 || by["evalsha"] != 2 || len(by) != 2 {
		t.Errorf("sub = %v, %d; want get 2, evalsha 2 (INFO and connection set-up left out)", by, total)
	}
	if got := sortedNames(by); !slices.Equal(got, []string{"evalsha", "get"}) {
		t.Errorf("sortedNames = %v", got)
	}
}

// TestScenarios checks the scenarios are all there, and that -quick
// shrinks them.
func TestScenarios(t *testing.T) {
	var names []string
	for _, s := range scenarios(false) {
		names = append(names, s.Name)
		if s.Rounds < 1 || s.Timeout <= 0 || s.Setup() == "" {
			t.Errorf("%s: rounds %d, timeout %v", s.Name, s.Rounds, s.Timeout)
		}
	}
	want := []string{"cold-stampede-20ms", "cold-stampede-200ms", "cold-stampede-2s", "expiry-zipf", "hit-path", "big-value", "redis-stall", "redis-outage", "redis-outage-warm", "long-load"}
	if !slices.Equal(names, want) {
		t.Errorf("scenarios = %v, want %v", names, want)
	}
	full, quick := scenarios(false)[0], scenarios(true)[0]
	if full.requests() != 2000 || quick.requests() >= full.requests() || quick.Rounds != 1 {
		t.Errorf("cold-stampede: full %d requests, quick %d in %d rounds", full.requests(), quick.requests(), quick.Rounds)
	}
}

// TestOutageWarm checks that redis-outage-warm is redis-outage's traffic
// with a warm-up, in full and in -quick sizes, and that its setup says so.
func TestOutageWarm(t *testing.T) {
	for _, quick := range []bool{false, true} {
		byName := map[string]Scenario{}
		for _, s := range scenarios(quick) {
			byName[s.Name] = *s
		}
		cold, warm := byName["redis-outage"], byName["redis-outage-warm"]
		if cold.Warm || !warm.Warm || !warm.Outage {
			t.Fatalf("quick %v: redis-outage warm %v; redis-outage-warm warm %v, outage %v", quick, cold.Warm, warm.Warm, warm.Outage)
		}
		if !strings.Contains(warm.Setup(), "every key warm first") || strings.Contains(cold.Setup(), "warm") {
			t.Errorf("quick %v: setups %q and %q", quick, cold.Setup(), warm.Setup())
		}
		warm.Name, warm.Description, warm.Warm = cold.Name, cold.Description, cold.Warm
		if warm != cold {
			t.Errorf("quick %v: redis-outage-warm differs from redis-outage beyond its warm-up:\n%+v\n%+v", quick, warm, cold)
		}
	}
	full, quick := scenarios(false), scenarios(true)
	i := slices.IndexFunc(full, func(s *Scenario) bool { return s.Name == "redis-outage-warm" })
	if quick[i].requests() >= full[i].requests() || quick[i].Duration != full[i].Duration {
		t.Errorf("-quick must shrink redis-outage-warm's goroutines, not its time: %d goroutines for %v, full %d for %v",
			quick[i].requests(), quick[i].Duration, full[i].requests(), full[i].Duration)
	}
}

// TestSystems checks the system list: every system can be made.
func TestSystems(t *testing.T) {
	sc := scenarios(false)[0]
	for _, s := range systems {
		if s.status(sc) != "" {
			t.Errorf("%s cannot run %s: %s", s.Name, sc.Name, s.status(sc))
		}
	}
}

func TestOrigin(t *testing.T) {
	o := &origin{values: newValues(1000)}
	a, err := o.load(context.Background(), "k1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := o.load(context.Background(), "k1")
	c, _ := o.load(context.Background(), "k2")
	if len(a) != 1000 || string(a) != string(b) || string(a) == string(c) {
		t.Error("a key's value must be the same on every load and differ from another key's")
	}
	a[0]++
	if check(b, nil, "k1", o.values) != nil || check(a, nil, "k1", o.values) == nil {
		t.Error("check must accept the origin's bytes only, and a caller's copy must be its own")
	}
	if o.loads.Load() != 3 || o.peak.Load() != 1 {
		t.Errorf("loads %d, peak %d", o.loads.Load(), o.peak.Load())
	}
}

// TestCharts draws the fixture's charts: one per measure and scenario, as
// PNG files named in BENCHMARKS.md's links.
func TestCharts(t *testing.T) {
	dir := t.TempDir()
	charts, err := writeCharts(fixture(t), dir, "bench/charts")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"cold-stampede-20ms": {"bench/charts/cold-stampede-20ms-p99.png", "bench/charts/cold-stampede-20ms-loads.png"},
		"hit-path":           {"bench/charts/hit-path.png"},
	}
	for sc, files := range want {
		if !slices.Equal(charts[sc], files) {
			t.Errorf("%s: charts %v, want %v", sc, charts[sc], files)
		}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(dir, filepath.Base(f)))
			if err != nil || len(b) < 8 || string(b[1:4]) != "PNG" {
				t.Errorf("%s is not a PNG file: %v", f, err)
			}
		}
	}
}

// TestTargetsGoal checks the p99 goal: a peer with one load beats corral
// only if it beats corral with and without its near cache.
func TestTargetsGoal(t *testing.T) {
	res := fixture(t)
	rows := res.Scenarios[0].Results
	one := int64(1)
	lat := func(p99 float64) *Latency { return &Latency{P50: p99, P99: p99, Max: p99} }
	rows[0].LatencyMS = lat(40)                                                          // corral
	rows[1] = SystemResult{System: "corral-near", OriginLoads: &one, LatencyMS: lat(30)} // built here
	rows[2].OriginLoads, rows[2].LatencyMS = &one, lat(35)                               // naive, as a peer with one load
	goal := func() string {
		for _, row := range targets(res) {
			if strings.Contains(row[0], "lowest p99") {
				return row[1]
			}
		}
		t.Fatal("no p99 goal row")
		return ""
	}
	if got := goal(); got != "cold-stampede-20ms: met (corral 40.0 ms, corral-near 30.0 ms)" {
		t.Errorf("a peer between corral and corral-near: %q", got)
	}
	rows[2].LatencyMS = lat(20)
	if got := goal(); got != "cold-stampede-20ms: **missed** (corral 40.0 ms, corral-near 30.0 ms, naive 20.0 ms)" {
		t.Errorf("a peer below both: %q", got)
	}
}

// outageResults are synthetic redis-outage and redis-outage-warm rows of
// corral, corral-near and sturdyc, which meet every outage target.
func outageResults() *Results {
	row := func(system string, answered, loads int64, p99 float64) SystemResult {
		per := float64(int(float64(loads)*1000/float64(answered)*10+0.5)) / 10
		var none int64
		return SystemResult{System: system, Requests: &answered, Answered: &answered, Errors: &none, OriginLoads: &loads,
			PeakOriginConcurrency: &none, LoadsPer1kRequests: &per, LatencyMS: &Latency{P50: 0.01, P99: p99, Max: p99 * 2}}
	}
	return &Results{Scenarios: []ScenarioResult{
		{Name: "redis-outage", Results: []SystemResult{
			row("corral", 25000, 250, 80), row("corral-near", 28000, 80, 50), row("sturdyc", 30000, 80, 45),
		}},
		{Name: "redis-outage-warm", Results: []SystemResult{
			row("corral", 9000, 3000, 1700), row("corral-near", 30000, 0, 15), row("sturdyc", 50000, 0, 0.002),
		}},
	}}
}

// outageVerdicts returns the result column of the outage targets' rows, in
// order.
func outageVerdicts(t *testing.T, res *Results) []string {
	t.Helper()
	var out []string
	for _, row := range targets(res) {
		if strings.HasPrefix(row[0], "redis-outage") {
			out = append(out, row[1])
		}
	}
	if len(out) != len(outageTargets) {
		t.Fatalf("%d outage target rows, want %d", len(out), len(outageTargets))
	}
	return out
}

func TestOutageTargetsMet(t *testing.T) {
	want := []string{
		"met: origin loads per 1,000 requests 10.0; requests answered 25000, sturdyc's 30000; p99 80.0 ms",
		"met: origin loads per 1,000 requests 2.9, sturdyc's 2.7; requests answered 28000, sturdyc's 30000; p99 50.0 ms",
		"met: origin loads 0, sturdyc's 0; p99 15.0 ms",
	}
	if got := outageVerdicts(t, outageResults()); !slices.Equal(got, want) {
		t.Errorf("verdicts:\n%q\nwant\n%q", got, want)
	}
	md := markdown(outageResults(), nil)
	for _, label := range []string{
		"| redis-outage, corral (default options): origin loads per 1,000 requests at most 12; requests answered at least 0.8x sturdyc's; p99 at most 100 ms | met: ",
		"| redis-outage, corral-near: origin loads per 1,000 requests at most 1.2x sturdyc's; requests answered at least 0.9x sturdyc's; p99 at most 60 ms | met: ",
		"| redis-outage-warm, corral-near: origin loads at most sturdyc's; p99 at most 20 ms | met: ",
	} {
		if !strings.Contains(md, label) {
			t.Errorf("BENCHMARKS.md lacks %q", label)
		}
	}
}

func TestOutageTargetsNotMet(t *testing.T) {
	res := outageResults()
	outage, warm := res.Scenarios[0].Results, res.Scenarios[1].Results
	outage[0].LatencyMS.P99 = 101       // corral: over its p99 bound only
	*outage[1].LoadsPer1kRequests = 3.3 // corral-near: over 1.2x sturdyc's 2.7 loads per 1k,
	*outage[1].Answered = 26999         // and under 0.9x sturdyc's 30000 answers
	*warm[1].OriginLoads = 1            // one load more than sturdyc
	warm[1].LatencyMS.P99 = 20.1
	want := []string{
		"**not met**: origin loads per 1,000 requests 10.0; requests answered 25000, sturdyc's 30000; p99 101 ms (over 100 ms)",
		"**not met**: origin loads per 1,000 requests 3.3, sturdyc's 2.7 (over 1.2x sturdyc's); requests answered 26999, sturdyc's 30000 (under 0.9x sturdyc's); p99 50.0 ms",
		"**not met**: origin loads 1, sturdyc's 0 (over sturdyc's); p99 20.1 ms (over 20 ms)",
	}
	if got := outageVerdicts(t, res); !slices.Equal(got, want) {
		t.Errorf("verdicts:\n%q\nwant\n%q", got, want)
	}
}

func TestOutageTargetsNotRun(t *testing.T) {
	res := outageResults()
	res.Scenarios[0].Results[2] = SystemResult{System: "sturdyc", Status: "failed: bench: connect to Redis: refused"}
	res.Scenarios = res.Scenarios[:1] // redis-outage-warm not run
	want := []string{
		"not run (sturdyc: failed: bench: connect to Redis: refused)",
		"not run (sturdyc: failed: bench: connect to Redis: refused)",
		"not run",
	}
	if got := outageVerdicts(t, res); !slices.Equal(got, want) {
		t.Errorf("verdicts:\n%q\nwant\n%q", got, want)
	}
	res.Scenarios[0].Results = res.Scenarios[0].Results[1:] // corral not in the run
	if got := outageVerdicts(t, res)[0]; got != "not run" {
		t.Errorf("corral absent: %q", got)
	}
	if got := outageVerdicts(t, fixture(t)); !slices.Equal(got, []string{"not run", "not run", "not run"}) {
		t.Errorf("a run without the outage scenarios: %q", got)
	}
}

// TestPeerWinsOutage checks that the reasons given in an outage scenario
// are the outage's: sturdyc's p99 by its in-memory cache, corral-near's by
// the near hits counted in the run.
func TestPeerWinsOutage(t *testing.T) {
	res := outageResults()
	near := int64(12345)
	safe := int64(100)
	res.Scenarios[0].Results[1].NearHits = &near
	res.Scenarios[0].Results[1].FailSafeHits = &safe
	wins := strings.Join(peerWins(res.Scenarios[0]), "\n")
	for _, want := range []string{
		"**sturdyc** has a lower p99 (45.0 ms against corral's 80.0): " + whyOutage["sturdyc/p99"],
		"**corral-near** has a lower p99 (50.0 ms against corral's 80.0): it is corral with its near cache, which answered 12445 of its 28000 requests while Redis was down from memory (12345 as near hits, Stats.NearHits; 100 from memory because Redis could not be used, Stats.FailSafeHits)",
	} {
		if !strings.Contains(wins, want) {
			t.Errorf("peer wins lack %q:\n%s", want, wins)
		}
	}
	if strings.Contains(wins, "pays with one origin load per instance") {
		t.Errorf("a burst's reason in an outage:\n%s", wins)
	}
}

// TestSummarizeWarm checks a redis-outage-warm row: origin loads are the
// outage's, the warm-up's apart, and a near cache's hits are summed over
// the rounds; results.json names both.
func TestSummarizeWarm(t *testing.T) {
	var sc *Scenario
	for _, s := range scenarios(false) {
		if s.Name == "redis-outage-warm" {
			sc = s
		}
	}
	rec := newRecorder()
	for range 100 {
		rec.record(time.Millisecond, nil)
	}
	var row SystemResult
	summarize(&row, []*trial{
		{loads: 2, peak: 1, warmLoads: 10, nearHits: 90, hasNear: true, rec: rec},
		{loads: 4, peak: 2, warmLoads: 9, nearHits: 80, hasNear: true, rec: rec},
	}, sc)
	if *row.OriginLoads != 4 || *row.WarmupOriginLoads != 10 || *row.NearHits != 170 || *row.LoadsPer1kRequests != 30 {
		t.Errorf("loads %d, warm-up loads %d, near hits %d, per 1k %.1f; want 4, 10, 170, 30.0",
			*row.OriginLoads, *row.WarmupOriginLoads, *row.NearHits, *row.LoadsPer1kRequests)
	}
	b, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"warmup_origin_loads":10`, `"near_hits":170`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("results.json row lacks %s: %s", k, b)
		}
	}
}

// TestChartsOutageWarm checks redis-outage-warm's charts: p99 and origin
// loads, the latter titled as counted after the warm-up.
func TestChartsOutageWarm(t *testing.T) {
	res := outageResults()
	ten := int64(10)
	for i := range res.Scenarios[1].Results {
		res.Scenarios[1].Results[i].WarmupOriginLoads = &ten
	}
	charts, err := writeCharts(res, t.TempDir(), "bench/charts")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bench/charts/redis-outage-warm-p99.png", "bench/charts/redis-outage-warm-loads.png"}
	if !slices.Equal(charts["redis-outage-warm"], want) {
		t.Errorf("charts %v, want %v", charts["redis-outage-warm"], want)
	}
	if loadsSpan(res.Scenarios[0]) != "" || loadsSpan(res.Scenarios[1]) == "" {
		t.Error("only redis-outage-warm's loads are counted after a warm-up")
	}
}

// Issue 27's stampede rows: corral's p99 against the best in-process
// coalescer's plus 3 ms, and its Redis commands per instance (8 in
// cold-stampede-20ms) against 4.
func TestStampedeTargets(t *testing.T) {
	res := fixture(t)
	sc := &res.Scenarios[0]
	sc.Results = append(sc.Results, SystemResult{System: "sturdyc", LatencyMS: &Latency{P99: 20}})
	rows := stampedeRows(res)
	if len(rows) != 2 {
		t.Fatalf("rows %q", rows)
	}
	// The fixture's corral: p99 30 ms, 22 commands a round over 8 instances.
	if want := "cold-stampede-20ms: **missed** (corral 30.0 ms, sturdyc 20.0 ms)"; rows[0][1] != want {
		t.Errorf("p99 row %q, want %q", rows[0][1], want)
	}
	if want := "cold-stampede-20ms: met (2.8)"; rows[1][1] != want {
		t.Errorf("commands row %q, want %q", rows[1][1], want)
	}
	sc.Results[len(sc.Results)-1].LatencyMS.P99 = 28
	if rows = stampedeRows(res); !strings.HasPrefix(rows[0][1], "cold-stampede-20ms: met") {
		t.Errorf("p99 row %q: 30 ms is within 3 ms of 28", rows[0][1])
	}
}
