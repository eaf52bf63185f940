package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/corralhq/corral/cmd/corral/internal/demo"
	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/pterm/pterm"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// newDemoCmd returns `corral demo`.
func newDemoCmd() *cobra.Command {
	defaults := demo.DefaultConfig()
	cfg, o := &defaults, &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replay a cache stampede against a real origin and compare strategies",
		Long: `demo replays a cache stampede against a real origin. Each strategy runs on
fresh keys (a cold cache), in turn, and the demo prints what the origin and
Redis went through: origin queries (loads), their peak concurrency and mean
duration, request latency (p50, p99, max), Redis commands, and errors
(failed requests or wrong values; every value is checked against the origin).

Scenarios (--scenario):
` + scenarioHelp() + `
Goroutine i (over all instances) asks for key i mod --keys. The stampede
releases all goroutines from one barrier. In expiry they start together and
stop at the deadline (a request in flight then finishes and counts); origin
loads count every load in the run, the first of each key included, and the
human output adds each strategy's origin loads per key per TTL: about 1 for a
cache that refreshes each key once per expiry.

The origin is a real SQL database with 100,000 generated orders over 2,000
customers, queried with an aggregate per key: an embedded in-memory ql
database (pure Go) by default, or PostgreSQL with --pg (table
corral_demo_orders, created and seeded once). Redis is an embedded
in-process server by default, or a real one with --redis. Nothing needs to
be installed for the defaults.

Strategies:
` + strategyHelp() + `
corral runs with its default options plus --stale-ttl as its
stale-while-revalidate window (corral.Options.StaleTTL): at each expiry it
serves the stale value while one caller refreshes in the background. With
--stale-ttl 0 (the library's own default) it refreshes early instead (XFetch).

Without --json, the output fits 80 columns, or the terminal's width when
stdout is one: the table has a row per strategy where that fits (about 120
columns), else a row per measure, else a list per strategy; text wraps at
spaces. With --json, stdout holds exactly one JSON document. The progress
bar goes to stderr when stderr is a terminal (--progress draws it anyway,
--no-progress never).

Every flag can also be set by an environment variable: CORRAL_DEMO_ and the
flag's name in capitals, dashes as underscores (CORRAL_DEMO_REDIS,
CORRAL_DEMO_PG: URLs with passwords stay off the command line). A flag on
the command line wins; a CORRAL_DEMO_ variable that is no flag's is an
error.`,
		Example: `  corral demo
  corral demo --redis redis://127.0.0.1:6379 --instances 8 --goroutines 500 --origin-latency 20ms
  corral demo --pg 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' --keys 4 --json
  corral demo --scenario expiry --goroutines 50 --duration 10s --ttl 2s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnvOf(cmd.Flags(), os.Environ(), "CORRAL_DEMO_", "demo"); err != nil {
				return errorf("demo: %w", err)
			}
			return runDemo(cmd, *cfg, *o)
		},
	}
	o.define(cmd, cfg)
	return cmd
}

// runDemo is corral demo's RunE.
func runDemo(cmd *cobra.Command, cfg demo.Config, o demoFlags) error {
	f := cmd.Flags()
	if cfg.Scenario != "expiry" {
		for _, name := range []string{"duration", "think"} {
			if f.Changed(name) {
				return errorf("demo: --%s applies only to --scenario expiry", name)
			}
		}
	}
	// An unset --ttl or --stale-ttl leaves the scenario's default
	// (zero TTL, nil StaleTTL); an explicit --ttl 0 is an error.
	if f.Changed("ttl") && cfg.TTL < time.Millisecond {
		return errorf("demo: --ttl must be at least 1ms (got %v)", cfg.TTL)
	}
	if f.Changed("stale-ttl") {
		if o.staleTTL < 0 {
			return errors.New("demo: --stale-ttl must not be negative")
		}
		cfg.StaleTTL = &o.staleTTL
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if drawProgress(stderr, o.progress, o.noProgress) {
		cfg.Progress = stderr
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	report, err := demo.Run(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	if o.jsonOut {
		return report.WriteJSON(stdout)
	}
	if !isTerminal(stdout) {
		pterm.DisableColor()
	}
	return demo.Render(stdout, report, wrap.Columns(stdout))
}

// demoFlags are corral demo's flags that are not the demo's Config.
type demoFlags struct {
	jsonOut, noProgress, progress bool
	staleTTL                      time.Duration
}

// define declares corral demo's flags on cmd, into cfg and o.
func (o *demoFlags) define(cmd *cobra.Command, cfg *demo.Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.RedisURL, "redis", "", "Redis URL (redis:// or rediss://); default: an embedded in-process Redis")
	f.StringVar(&cfg.PostgresDSN, "pg", "", "PostgreSQL DSN to use as the origin instead of the embedded ql database")
	f.StringVar(&cfg.Scenario, "scenario", cfg.Scenario, "how requests arrive: "+strings.Join(demo.ScenarioNames(), " or "))
	f.IntVar(&cfg.Instances, "instances", cfg.Instances, "independent app instances, each with its own Redis client and cache")
	f.IntVar(&cfg.Goroutines, "goroutines", cfg.Goroutines, "concurrent requests per instance")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "hot keys the requests are spread over (request i asks for key i mod keys)")
	f.DurationVar(&cfg.OriginLatency, "origin-latency", cfg.OriginLatency, "latency added to each origin query, modelling a remote database")
	f.StringSliceVar(&cfg.Strategies, "strategies", cfg.Strategies, "strategies to run, in order ("+strings.Join(demo.StrategyNames(), ", ")+")")
	f.DurationVar(&cfg.TTL, "ttl", 0, fmt.Sprintf("time to live of the cached values (default %s for stampede, so values outlive the run; "+
		"%s for expiry, so keys expire several times in it: it must be below --duration)", fmtDuration(demo.DefaultTTL), fmtDuration(demo.DefaultExpiryTTL)))
	f.DurationVar(&o.staleTTL, "stale-ttl", 0, "corral's stale-while-revalidate window after the TTL, corral.Options.StaleTTL "+
		"(default 0 for stampede; equal to --ttl for expiry)")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "expiry only: how long each strategy's run sends requests")
	f.DurationVar(&cfg.Think, "think", cfg.Think, "expiry only: each goroutine's pause between its requests (0: none)")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "bound on each strategy's run (after --duration for expiry); requests still running then count as errors")
	f.BoolVar(&o.jsonOut, "json", false, "print one JSON document on stdout instead of a table and charts")
	f.BoolVar(&o.noProgress, "no-progress", false, "do not draw the progress bar on stderr")
	f.BoolVar(&o.progress, "progress", false, "draw the progress bar on stderr even when it is not a terminal")
}

// fmtDuration formats d as time.Duration does, without a trailing "0s"
// after minutes ("1m", not "1m0s").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	return s
}

func scenarioHelp() string {
	var b strings.Builder
	for _, s := range demo.Scenarios() {
		fmt.Fprintf(&b, "  %-9s %s\n", s.Name(), s.Help())
	}
	return b.String()
}

func strategyHelp() string {
	var b strings.Builder
	for _, s := range demo.Strategies() {
		fmt.Fprintf(&b, "  %-7s %s\n", s.Name(), s.Summary())
	}
	return b.String()
}

// drawProgress says whether a progress bar goes to stderr: when it is a
// terminal (a log file would fill with redraws), unless --no-progress; or
// always with --progress.
func drawProgress(stderr io.Writer, always, never bool) bool {
	return !never && (always || isTerminal(stderr))
}

// isTerminal reports whether w is a terminal, so colours make sense.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
