package demo

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/pterm/pterm"
)

// chartWidth is the width of the longest bar, in cells.
const chartWidth = 40

// Render writes the human form of r to w: a header naming the Redis and
// the origin, a table of the results and bar charts comparing the
// strategies. Colours follow pterm's global setting (off with NO_COLOR or
// pterm.DisableColor).
func Render(w io.Writer, r *Report) error {
	for _, part := range []func(io.Writer, *Report) error{renderHeader, renderTable, renderLoadsPerTTL, renderCharts, renderErrors} {
		if err := part(w, r); err != nil {
			return err
		}
	}
	return nil
}

// renderHeader writes what was run: the summary, Redis and the origin.
func renderHeader(w io.Writer, r *Report) error {
	c := r.Config
	latency := "no added latency"
	if c.OriginLatencyMS > 0 {
		latency = "+" + strconv.FormatFloat(c.OriginLatencyMS, 'f', -1, 64) + "ms per query"
	}
	redisLabel := c.Redis
	if redisLabel == "embedded" {
		redisLabel = "embedded (in-process miniredis; pass --redis URL for a real server)"
	}
	_, err := fmt.Fprintf(w, "corral demo: %s\nRedis:  %s\nOrigin: %s, %d orders, %s\n\n",
		r.Summary, redisLabel, c.Origin, c.OriginRows, latency)
	return err
}

// renderTable writes one row per strategy, and the legend under it.
func renderTable(w io.Writer, r *Report) error {
	rows := [][]string{{"strategy", "requests", "origin loads", "peak origin conc.", "origin ms",
		"p50 ms", "p99 ms", "max ms", "Redis commands", "errors"}}
	for _, res := range r.Results {
		rows = append(rows, []string{res.Strategy, strconv.Itoa(res.Requests),
			strconv.FormatInt(res.OriginLoads, 10), strconv.FormatInt(res.PeakOriginConcurrency, 10),
			fmtMS(res.OriginMS), fmtMS(res.LatencyMS.P50), fmtMS(res.LatencyMS.P99), fmtMS(res.LatencyMS.Max),
			strconv.FormatUint(res.RedisCommands, 10), strconv.FormatInt(res.Errors, 10)})
	}
	table, err := pterm.DefaultTable.WithHasHeader().WithRightAlignment().WithData(rows).Srender()
	if err != nil {
		return fmt.Errorf("demo: render table: %w", err)
	}
	_, err = fmt.Fprint(w, strings.TrimRight(table, "\n")+"\n\n"+legend(r))
	return err
}

// renderCharts writes a bar chart per measure, one bar per strategy.
func renderCharts(w io.Writer, r *Report) error {
	charts := []struct {
		title string
		value func(Result) float64
	}{
		{"Origin loads (fewer is better)", func(r Result) float64 { return float64(r.OriginLoads) }},
		{"p99 latency, ms (lower is better)", func(r Result) float64 { return r.LatencyMS.P99 }},
		{"Redis commands (fewer is better)", func(r Result) float64 { return float64(r.RedisCommands) }},
	}
	for _, ch := range charts {
		bars := make(pterm.Bars, len(r.Results))
		for i, res := range r.Results {
			bars[i] = pterm.Bar{Label: res.Strategy, Value: int(math.Round(ch.value(res)))}
		}
		chart, err := pterm.DefaultBarChart.WithHorizontal().WithShowValue().
			WithWidth(chartWidth).WithBars(bars).Srender()
		if err != nil {
			return fmt.Errorf("demo: render chart: %w", err)
		}
		if _, err := fmt.Fprintf(w, "\n%s\n%s", ch.title, chart); err != nil {
			return err
		}
	}
	return nil
}

// renderErrors writes, for each strategy that got errors, their count and
// the first.
func renderErrors(w io.Writer, r *Report) error {
	for _, res := range r.Results {
		if res.FirstError != "" {
			if _, err := fmt.Fprintf(w, "\n%s: %d %s; the first: %s\n",
				res.Strategy, res.Errors, plural(int(res.Errors), "error", "errors"), res.FirstError); err != nil {
				return err
			}
		}
	}
	return nil
}

// renderLoadsPerTTL writes, for a run with a duration (expiry), each
// strategy's origin loads per key per TTL: loads / (keys x duration / TTL).
// A cache that refreshes each key once per expiry shows about 1.
func renderLoadsPerTTL(w io.Writer, r *Report) error {
	c := r.Config
	if c.DurationSeconds == nil || c.TTLSeconds <= 0 || c.Keys < 1 {
		return nil
	}
	ttls := *c.DurationSeconds / c.TTLSeconds
	if _, err := fmt.Fprintf(w, "\nOrigin loads per key per TTL = origin loads / (%d %s x %gs / %gs):\n",
		c.Keys, plural(c.Keys, "key", "keys"), *c.DurationSeconds, c.TTLSeconds); err != nil {
		return err
	}
	width := 0
	for _, res := range r.Results {
		width = max(width, len(res.Strategy))
	}
	for _, res := range r.Results {
		perTTL := float64(res.OriginLoads) / (float64(c.Keys) * ttls)
		if _, err := fmt.Fprintf(w, "  %-*s  %s\n", width, res.Strategy, strconv.FormatFloat(perTTL, 'f', 2, 64)); err != nil {
			return err
		}
	}
	return nil
}

// fmtMS formats ms with one decimal, as the report rounds them.
func fmtMS(ms float64) string { return strconv.FormatFloat(ms, 'f', 1, 64) }

// legend says, under the table, what each strategy of r is and what
// "origin ms" measures.
func legend(r *Report) string {
	var b strings.Builder
	for _, res := range r.Results {
		for _, s := range strategies {
			if s.Name() == res.Strategy {
				fmt.Fprintf(&b, "  %-7s %s\n", s.Name(), s.Summary())
			}
		}
	}
	b.WriteString("  origin ms: the mean time of one origin query, the added latency included\n")
	return b.String()
}
