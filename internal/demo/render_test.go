package demo_test

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/demo"
)

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

func TestRender(t *testing.T) {
	r := &demo.Report{
		Summary: "stampede: 200 requests at once (4 instances x 50 goroutines) on 2 cold keys",
		Config: demo.ReportConfig{Scenario: "stampede", Redis: "redis://127.0.0.1:6379", Origin: "postgres",
			OriginRows: 100000, Instances: 4, Goroutines: 50, Keys: 2, OriginLatencyMS: 30,
			Strategies: []string{"naive", "seed", "corral"}, RequestsPerStrategy: 200},
		Results: []demo.Result{
			{Strategy: "naive", Requests: 200, OriginLoads: 173, PeakOriginConcurrency: 171, OriginMS: 62.5,
				LatencyMS: demo.Latency{P50: 70.1, P99: 88.4, Max: 90.2}, RedisCommands: 373},
			{Strategy: "seed", Requests: 200, OriginLoads: 3, PeakOriginConcurrency: 2, OriginMS: 31.2,
				LatencyMS: demo.Latency{P50: 130.9, P99: 1038.6, Max: 1040.1}, RedisCommands: 1602,
				Errors: 1, FirstError: "demo: seed: gave up"},
			{Strategy: "corral", Requests: 200, OriginLoads: 2, PeakOriginConcurrency: 2, OriginMS: 31.4,
				LatencyMS: demo.Latency{P50: 33.3, P99: 35.9, Max: 36.8}, RedisCommands: 29},
		},
	}
	var buf bytes.Buffer
	if err := demo.Render(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := ansi.ReplaceAllString(buf.String(), "")
	t.Log("\n" + out)

	for _, want := range []string{"Redis:  redis://127.0.0.1:6379", "Origin: postgres", "+30ms per query",
		"200 requests at once", "seed: 1 error; the first: demo: seed: gave up",
		"  seed    the usual recipe: GET; SET lock:key NX EX 10", "  origin ms: the mean time of one origin query"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "per key per TTL") {
		t.Errorf("the stampede's output shows loads per TTL, which need a duration")
	}
	// One table row per strategy, with its numbers in order.
	rows := map[string][]string{
		"naive":  {"200", "173", "171", "62.5", "70.1", "88.4", "90.2", "373", "0"},
		"seed":   {"200", "3", "2", "31.2", "130.9", "1038.6", "1040.1", "1602", "1"},
		"corral": {"200", "2", "2", "31.4", "33.3", "35.9", "36.8", "29", "0"},
	}
	for name, cells := range rows {
		pattern := `(?m)^.*\b` + name + `\b.*` + strings.Join(escaped(cells), `\D+`) + `\D*$`
		if !regexp.MustCompile(pattern).MatchString(out) {
			t.Errorf("no table row for %s with %v", name, cells)
		}
	}
	// Three charts, each with a bar and its value for every strategy.
	charts := map[string]map[string]string{
		"Origin loads":   {"naive": "173", "seed": "3", "corral": "2"},
		"p99 latency":    {"naive": "88", "seed": "1039", "corral": "36"},
		"Redis commands": {"naive": "373", "seed": "1602", "corral": "29"},
	}
	for title, bars := range charts {
		i := strings.Index(out, "\n"+title)
		if i < 0 {
			t.Errorf("no chart %q", title)
			continue
		}
		section := out[i+1:]
		if j := strings.Index(section, "\n\n"); j >= 0 {
			section = section[:j]
		}
		for name, value := range bars {
			if !regexp.MustCompile(`(?m)^` + name + ` +█* +` + value + ` *$`).MatchString(section) {
				t.Errorf("chart %q: no bar %s = %s in\n%s", title, name, value, section)
			}
		}
	}
}

// TestRenderExpiry checks what the human output adds for the expiry
// scenario: each strategy's origin loads per key per TTL.
func TestRenderExpiry(t *testing.T) {
	r := &demo.Report{
		Summary: "expiry: 8 instances x 50 goroutines request 2 hot keys for 5s, pausing 10ms between requests; TTL 1s, corral's stale window 1s",
		Config: demo.ReportConfig{Scenario: "expiry", Redis: "embedded", Origin: "sqlite (embedded)",
			OriginRows: 100000, Instances: 8, Goroutines: 50, Keys: 2, OriginLatencyMS: 50,
			TTLSeconds: 1, StaleTTLSeconds: 1, DurationSeconds: new(5.0), ThinkMS: new(10.0),
			Strategies: []string{"naive", "seed", "corral"}},
		Results: []demo.Result{
			{Strategy: "naive", Requests: 80000, OriginLoads: 4000, PeakOriginConcurrency: 400},
			{Strategy: "seed", Requests: 70000, OriginLoads: 12, PeakOriginConcurrency: 1},
			{Strategy: "corral", Requests: 140000, OriginLoads: 11, PeakOriginConcurrency: 1},
		},
	}
	var buf bytes.Buffer
	if err := demo.Render(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := ansi.ReplaceAllString(buf.String(), "")
	t.Log("\n" + out)
	for _, want := range []string{"corral demo: expiry: 8 instances x 50 goroutines request 2 hot keys for 5s",
		"Origin loads per key per TTL = origin loads / (2 keys x 5s / 1s):",
		"\n  naive   400.00\n", "\n  seed    1.20\n", "\n  corral  1.10\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func escaped(cells []string) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = regexp.QuoteMeta(c)
	}
	return out
}
