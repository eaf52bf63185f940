package demo_test

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/cmd/corral/internal/demo"
	"github.com/corralhq/corral/cmd/corral/internal/wrap"
)

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// stampedeReport is a realistic stampede's report, one error included.
func stampedeReport() *demo.Report {
	return &demo.Report{
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
}

// extremeReport is an expiry run with the largest figures a long run
// makes, a long Redis URL and a long error message.
func extremeReport() *demo.Report {
	return &demo.Report{
		Summary: "expiry: 64 instances x 1000 goroutines request 2000 hot keys for 10m0s, pausing 10ms between requests; TTL 2s, corral's stale window 2s",
		Config: demo.ReportConfig{Scenario: "expiry", Redis: "rediss://app:xxxxx@redis-primary.cache.internal.example.com:6380/0",
			Origin: "postgres", OriginRows: 100000, Instances: 64, Goroutines: 1000, Keys: 2000, OriginLatencyMS: 250.5,
			TTLSeconds: 2, StaleTTLSeconds: 2, DurationSeconds: new(600.0), ThinkMS: new(10.0),
			Strategies: []string{"naive", "seed", "corral"}},
		Results: []demo.Result{
			{Strategy: "naive", Requests: 98765432, OriginLoads: 12345678, PeakOriginConcurrency: 64000, OriginMS: 12345.6,
				LatencyMS: demo.Latency{P50: 23456.7, P99: 123456.7, Max: 987654.3}, RedisCommands: 123456789, Errors: 1234567,
				FirstError: "demo: naive: GET demo:expiry:k:1999: dial tcp 127.0.0.1:6380: i/o timeout; the origin answered " +
					"pq: canceling statement due to statement timeout after 30000ms (SQLSTATE 57014)"},
			{Strategy: "seed", Requests: 1234567, OriginLoads: 600000, PeakOriginConcurrency: 2000, OriginMS: 250.9,
				LatencyMS: demo.Latency{P50: 100.2, P99: 1038.6, Max: 30000.1}, RedisCommands: 1234567},
			{Strategy: "corral", Requests: 87654321, OriginLoads: 600001, PeakOriginConcurrency: 2000, OriginMS: 251.1,
				LatencyMS: demo.Latency{P50: 0.4, P99: 2.8, Max: 253.4}, RedisCommands: 7317},
		},
	}
}

// render renders r at width and returns the output without colours.
func render(t *testing.T, r *demo.Report, width int) string {
	t.Helper()
	var buf bytes.Buffer
	if err := demo.Render(&buf, r, width); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(buf.String()) {
		if w := wrap.Width(line); w > width {
			t.Errorf("width %d: a line of %d columns: %q", width, w, line)
		}
	}
	return ansi.ReplaceAllString(buf.String(), "")
}

// measures are the table's labels, each with the figure of a Result.
var measures = []struct {
	label string
	cell  func(demo.Result) string
}{
	{"requests", func(r demo.Result) string { return itoa(int64(r.Requests)) }},
	{"origin loads", func(r demo.Result) string { return itoa(r.OriginLoads) }},
	{"peak origin conc", func(r demo.Result) string { return itoa(r.PeakOriginConcurrency) }},
	{"origin ms", func(r demo.Result) string { return ms(r.OriginMS) }},
	{"p50 ms", func(r demo.Result) string { return ms(r.LatencyMS.P50) }},
	{"p99 ms", func(r demo.Result) string { return ms(r.LatencyMS.P99) }},
	{"max ms", func(r demo.Result) string { return ms(r.LatencyMS.Max) }},
	{"Redis commands", func(r demo.Result) string { return itoa(int64(r.RedisCommands)) }},
	{"errors", func(r demo.Result) string { return itoa(r.Errors) }},
}

// checkFigures fails t unless every figure of r's table is whole on a line
// that names its strategy or its measure, in any layout.
func checkFigures(t *testing.T, out string, r *demo.Report, width int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for _, res := range r.Results {
		for _, m := range measures {
			figure := regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(m.cell(res)) + `([^0-9.]|$)`)
			found := false
			for _, line := range lines {
				named := strings.Contains(line, m.label) || regexp.MustCompile(`\b`+res.Strategy+`\b`).MatchString(line)
				found = found || named && figure.MatchString(line)
			}
			if !found {
				t.Errorf("width %d: %s's %s (%s) is not whole on a line of its row", width, res.Strategy, m.label, m.cell(res))
			}
		}
	}
}

// checkProse fails t unless each of texts is in out whole, its words in
// order, wrapped at spaces only.
func checkProse(t *testing.T, out string, width int, texts ...string) {
	t.Helper()
	words := " " + strings.Join(strings.Fields(out), " ") + " "
	for _, s := range texts {
		if !strings.Contains(words, " "+strings.Join(strings.Fields(s), " ")+" ") {
			t.Errorf("width %d: the output lacks, whole: %q", width, s)
		}
	}
}

// Every line fits the width, whichever layout the table takes, and no
// figure or word is cut.
func TestRenderFitsTheWidth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		report *demo.Report
	}{{"stampede", stampedeReport()}, {"extreme expiry", extremeReport()}} {
		for _, width := range []int{200, 80, 60, 40} {
			out := render(t, tc.report, width)
			t.Logf("%s at %d columns:\n%s", tc.name, width, out)
			checkFigures(t, out, tc.report, width)
			texts := []string{tc.report.Summary,
				"the usual recipe: GET; SET lock:key NX EX 10; the holder loads, SETs and DELs the lock; others sleep 100ms and retry",
				"origin ms: the mean time of one origin query, the added latency included"}
			for _, res := range tc.report.Results {
				if res.FirstError != "" {
					errs := " errors; "
					if res.Errors == 1 {
						errs = " error; "
					}
					texts = append(texts, res.Strategy+": "+itoa(res.Errors)+errs+"the first: "+res.FirstError)
				}
			}
			// A URL wider than the line beside "Redis:  " is the one
			// word cut.
			if redis := "Redis:  " + tc.report.Config.Redis; wrap.Width(redis) <= width {
				texts = append(texts, redis)
			}
			checkProse(t, out, width, texts...)
		}
	}
}

// The table takes the widest layout that fits: a row per strategy, a row per
// measure, or a list per strategy.
func TestRenderLayouts(t *testing.T) {
	for _, tc := range []struct {
		width int
		want  string
	}{
		{200, `(?m)^strategy │ requests │ origin loads │ peak origin conc\. │ origin ms │ p50 ms │ p99 ms │ max ms │ Redis commands │ errors$`},
		{119, `(?m)^ +naive │ +200 │ +173 │ +171 │ +62\.5 │ +70\.1 │ +88\.4 │ +90\.2 │ +373 │ +0$`},
		{80, `(?m)^ +│ naive │ +seed │ corral\n─+\nrequests +│ +200 │ +200 │ +200$`},
		{60, `(?m)^peak origin concurrency │ +171 │ +2 │ +2\n`},
		{40, `(?m)^seed\n  requests +200\n  origin loads +3\n  peak origin concurrency +2\n`},
	} {
		out := render(t, stampedeReport(), tc.width)
		if !regexp.MustCompile(tc.want).MatchString(out) {
			t.Errorf("width %d: no match for %s in\n%s", tc.width, tc.want, out)
		}
	}
}

func TestRender(t *testing.T) {
	out := render(t, stampedeReport(), 80)
	t.Log("\n" + out)
	for _, want := range []string{"corral demo: stampede: 200 requests at once (4 instances x 50 goroutines) on 2\n             cold keys\n",
		"\nRedis:  redis://127.0.0.1:6379\n", "\nOrigin: postgres, 100000 orders, +30ms per query\n",
		"\nseed: 1 error; the first: demo: seed: gave up\n",
		"\n  seed    the usual recipe: GET; SET lock:key NX EX 10; the holder loads, SETs\n          and DELs the lock;",
		"\n  origin ms: the mean time of one origin query, the added latency included\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "per key per TTL") {
		t.Errorf("the stampede's output shows loads per TTL, which need a duration")
	}
	// A row per measure, with each strategy's figure in order.
	rows := map[string][]string{
		"requests":                {"200", "200", "200"},
		"origin loads":            {"173", "3", "2"},
		"peak origin concurrency": {"171", "2", "2"},
		"origin ms":               {"62.5", "31.2", "31.4"},
		"p99 ms":                  {"88.4", "1038.6", "35.9"},
		"Redis commands":          {"373", "1602", "29"},
		"errors":                  {"0", "1", "0"},
	}
	for label, cells := range rows {
		pattern := `(?m)^` + label + ` +│ +` + strings.Join(escaped(cells), ` │ +`) + `$`
		if !regexp.MustCompile(pattern).MatchString(out) {
			t.Errorf("no table row %s with %v", label, cells)
		}
	}
	checkCharts(t, out)
}

// checkCharts fails t unless out has three charts, each with a bar and
// its value for every strategy of stampedeReport.
func checkCharts(t *testing.T, out string) {
	t.Helper()
	charts := map[string]map[string]string{
		"Origin loads (fewer is better)":    {"naive": "173", "seed": "3", "corral": "2"},
		"p99 latency, ms (lower is better)": {"naive": "88", "seed": "1039", "corral": "36"},
		"Redis commands (fewer is better)":  {"naive": "373", "seed": "1602", "corral": "29"},
	}
	for title, bars := range charts {
		i := strings.Index(out, "\n"+title+"\n")
		if i < 0 {
			t.Errorf("no chart %q", title)
			continue
		}
		section := out[i+len(title)+2:]
		if j := strings.Index(strings.TrimLeft(section, "\n"), "\n\n"); j >= 0 {
			section = strings.TrimLeft(section, "\n")[:j]
		}
		for name, value := range bars {
			if !regexp.MustCompile(`(?m)^` + name + ` +█* +` + value + `$`).MatchString(section) {
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
		Config: demo.ReportConfig{Scenario: "expiry", Redis: "embedded", Origin: "ql (embedded)",
			OriginRows: 100000, Instances: 8, Goroutines: 50, Keys: 2, OriginLatencyMS: 50,
			TTLSeconds: 1, StaleTTLSeconds: 1, DurationSeconds: new(5.0), ThinkMS: new(10.0),
			Strategies: []string{"naive", "seed", "corral"}},
		Results: []demo.Result{
			{Strategy: "naive", Requests: 80000, OriginLoads: 4000, PeakOriginConcurrency: 400},
			{Strategy: "seed", Requests: 70000, OriginLoads: 12, PeakOriginConcurrency: 1},
			{Strategy: "corral", Requests: 140000, OriginLoads: 11, PeakOriginConcurrency: 1},
		},
	}
	out := render(t, r, 80)
	t.Log("\n" + out)
	for _, want := range []string{"corral demo: expiry: 8 instances x 50 goroutines request 2 hot keys for 5s,\n",
		"\nRedis:  embedded (in-process miniredis; pass --redis URL for a real server)\n",
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

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
