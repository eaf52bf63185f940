package demo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/pterm/pterm"
)

// A measure is one figure of a Result, a column of the results table (or a
// row of it, turned to fit a narrower width).
type measure struct {
	label  string // in full, as a row's label
	header string // as the header of the widest table's column
	cell   func(Result) string
}

// measures are the results table's figures, in order.
var measures = []measure{
	{"requests", "requests", func(r Result) string { return strconv.Itoa(r.Requests) }},
	{"origin loads", "origin loads", func(r Result) string { return strconv.FormatInt(r.OriginLoads, 10) }},
	{"peak origin concurrency", "peak origin conc.", func(r Result) string { return strconv.FormatInt(r.PeakOriginConcurrency, 10) }},
	{"origin ms", "origin ms", func(r Result) string { return fmtMS(r.OriginMS) }},
	{"p50 ms", "p50 ms", func(r Result) string { return fmtMS(r.LatencyMS.P50) }},
	{"p99 ms", "p99 ms", func(r Result) string { return fmtMS(r.LatencyMS.P99) }},
	{"max ms", "max ms", func(r Result) string { return fmtMS(r.LatencyMS.Max) }},
	{"Redis commands", "Redis commands", func(r Result) string { return strconv.FormatUint(r.RedisCommands, 10) }},
	{"errors", "errors", func(r Result) string { return strconv.FormatInt(r.Errors, 10) }},
}

// fmtMS formats ms with one decimal, as the report rounds them.
func fmtMS(ms float64) string { return strconv.FormatFloat(ms, 'f', 1, 64) }

// renderTable returns the results in the first layout whose lines fit in
// width columns (the last if none does), then the legend. The layouts, from
// the widest: a row per strategy; a row per measure, a column per strategy
// (about 55 columns for the largest figures); a list of the measures under
// each strategy's name (about 35). A figure is never cut.
func renderTable(r *Report, width int) (string, error) {
	var table string
	for _, layout := range []func(*Report) (string, error){rowPerStrategy, rowPerMeasure, listPerStrategy} {
		t, err := layout(r)
		if err != nil {
			return "", err
		}
		table = t
		if wrap.Width(t) <= width {
			break
		}
	}
	return strings.TrimRight(table, "\n") + "\n\n" + legend(r, width), nil
}

// rowPerStrategy returns the table with a row per strategy, a column per
// measure: about 120 columns.
func rowPerStrategy(r *Report) (string, error) {
	header := []string{"strategy"}
	for _, m := range measures {
		header = append(header, m.header)
	}
	rows := [][]string{header}
	for _, res := range r.Results {
		row := []string{res.Strategy}
		for _, m := range measures {
			row = append(row, m.cell(res))
		}
		rows = append(rows, row)
	}
	return ptermTable(rows)
}

// rowPerMeasure returns the table with a row per measure, a column per
// strategy.
func rowPerMeasure(r *Report) (string, error) {
	labels := 0
	for _, m := range measures {
		labels = max(labels, len(m.label))
	}
	// Every label cell as wide as the widest, so that the right
	// alignment of the figures leaves the labels aligned left.
	header := []string{strings.Repeat(" ", labels)}
	for _, res := range r.Results {
		header = append(header, res.Strategy)
	}
	rows := [][]string{header}
	for _, m := range measures {
		row := []string{fmt.Sprintf("%-*s", labels, m.label)}
		for _, res := range r.Results {
			row = append(row, m.cell(res))
		}
		rows = append(rows, row)
	}
	return ptermTable(rows)
}

// listPerStrategy returns, for each strategy, its name and a line per
// measure below it.
func listPerStrategy(r *Report) (string, error) {
	labels, cells := 0, 0
	for _, m := range measures {
		labels = max(labels, len(m.label))
		for _, res := range r.Results {
			cells = max(cells, len(m.cell(res)))
		}
	}
	var b strings.Builder
	for i, res := range r.Results {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(pterm.Bold.Sprint(res.Strategy) + "\n")
		for _, m := range measures {
			fmt.Fprintf(&b, "  %-*s  %*s\n", labels, m.label, cells, m.cell(res))
		}
	}
	return b.String(), nil
}

// ptermTable renders rows, the first a header, with the figures aligned
// right.
func ptermTable(rows [][]string) (string, error) {
	table, err := pterm.DefaultTable.WithHasHeader().WithRightAlignment().WithData(rows).Srender()
	if err != nil {
		return "", fmt.Errorf("demo: render table: %w", err)
	}
	return table, nil
}
