package demo

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/pterm/pterm"
)

// chartWidth is the width of the longest bar, in cells, when the width
// allows it.
const chartWidth = 40

// Render writes the human form of r to w in lines of at most width display
// columns (wrap.DefaultColumns when width < 1): a header naming the Redis and
// the origin, a table of the results in the first layout that fits (see
// renderTable), a legend, and bar charts comparing the strategies. Prose
// wraps at spaces, so no number is cut in two. Colours follow pterm's global
// setting (off with NO_COLOR or pterm.DisableColor) and take no column.
func Render(w io.Writer, r *Report, width int) error {
	if width < 1 {
		width = wrap.DefaultColumns
	}
	var out strings.Builder
	for _, part := range []func(*Report, int) (string, error){renderHeader, renderTable, renderLoadsPerTTL, renderCharts, renderErrors} {
		s, err := part(r, width)
		if err != nil {
			return err
		}
		out.WriteString(s)
	}
	_, err := io.WriteString(w, trimLines(out.String()))
	return err
}

// trimLines drops the spaces at the ends of the lines of s (pterm pads its
// charts to a rectangle).
func trimLines(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(strings.TrimRight(line, " \n"))
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// renderHeader returns what was run: the summary, Redis and the origin.
func renderHeader(r *Report, width int) (string, error) {
	c := r.Config
	latency := "no added latency"
	if c.OriginLatencyMS > 0 {
		latency = "+" + strconv.FormatFloat(c.OriginLatencyMS, 'f', -1, 64) + "ms per query"
	}
	redisLabel := c.Redis
	if redisLabel == "embedded" {
		redisLabel = "embedded (in-process miniredis; pass --redis URL for a real server)"
	}
	return wrap.Hanging("corral demo: ", r.Summary, width) + "\n" +
		wrap.Hanging("Redis:  ", redisLabel, width) + "\n" +
		wrap.Hanging("Origin: ", fmt.Sprintf("%s, %d orders, %s", c.Origin, c.OriginRows, latency), width) + "\n\n", nil
}

// renderCharts returns a bar chart per measure, one bar per strategy, the
// bars as long as width allows up to chartWidth.
func renderCharts(r *Report, width int) (string, error) {
	charts := []struct {
		title string
		value func(Result) float64
	}{
		{"Origin loads (fewer is better)", func(r Result) float64 { return float64(r.OriginLoads) }},
		{"p99 latency, ms (lower is better)", func(r Result) float64 { return r.LatencyMS.P99 }},
		{"Redis commands (fewer is better)", func(r Result) float64 { return float64(r.RedisCommands) }},
	}
	var b strings.Builder
	for _, ch := range charts {
		bars := make(pterm.Bars, len(r.Results))
		labels, values := 0, 0
		for i, res := range r.Results {
			bars[i] = pterm.Bar{Label: res.Strategy, Value: int(math.Round(ch.value(res)))}
			labels = max(labels, wrap.Width(res.Strategy))
			values = max(values, len(strconv.Itoa(bars[i].Value)))
		}
		// A line: the label and a space, the bar, two spaces, the value
		// and a space.
		bar := max(min(chartWidth, width-labels-values-4), 1)
		chart, err := pterm.DefaultBarChart.WithHorizontal().WithShowValue().
			WithWidth(bar).WithBars(bars).Srender()
		if err != nil {
			return "", fmt.Errorf("demo: render chart: %w", err)
		}
		fmt.Fprintf(&b, "\n%s\n%s", wrap.Hanging("", ch.title, width), chart)
	}
	return b.String(), nil
}

// renderErrors returns, for each strategy that got errors, their count and
// the first.
func renderErrors(r *Report, width int) (string, error) {
	var b strings.Builder
	for _, res := range r.Results {
		if res.FirstError != "" {
			text := fmt.Sprintf("%d %s; the first: %s", res.Errors, plural(int(res.Errors), "error", "errors"), res.FirstError)
			fmt.Fprintf(&b, "\n%s\n", wrap.Hanging(res.Strategy+": ", text, width))
		}
	}
	return b.String(), nil
}

// renderLoadsPerTTL returns, for a run with a duration (expiry), each
// strategy's origin loads per key per TTL: loads / (keys x duration / TTL).
// A cache that refreshes each key once per expiry shows about 1.
func renderLoadsPerTTL(r *Report, width int) (string, error) {
	c := r.Config
	if c.DurationSeconds == nil || c.TTLSeconds <= 0 || c.Keys < 1 {
		return "", nil
	}
	ttls := *c.DurationSeconds / c.TTLSeconds
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n", wrap.Hanging("", fmt.Sprintf("Origin loads per key per TTL = origin loads / (%d %s x %gs / %gs):",
		c.Keys, plural(c.Keys, "key", "keys"), *c.DurationSeconds, c.TTLSeconds), width))
	names := 0
	for _, res := range r.Results {
		names = max(names, len(res.Strategy))
	}
	for _, res := range r.Results {
		perTTL := float64(res.OriginLoads) / (float64(c.Keys) * ttls)
		fmt.Fprintf(&b, "  %-*s  %s\n", names, res.Strategy, strconv.FormatFloat(perTTL, 'f', 2, 64))
	}
	return b.String(), nil
}

// legend says, under the table, what each strategy of r is and what
// "origin ms" measures, in lines of at most width columns.
func legend(r *Report, width int) string {
	var b strings.Builder
	for _, res := range r.Results {
		for _, s := range strategies {
			if s.Name() == res.Strategy {
				b.WriteString(wrap.Hanging(fmt.Sprintf("  %-7s ", s.Name()), s.Summary(), width) + "\n")
			}
		}
	}
	b.WriteString(wrap.Hanging("  origin ms: ", "the mean time of one origin query, the added latency included", width) + "\n")
	return b.String()
}
