package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/corralhq/corral/internal/demo"
	"github.com/pterm/pterm"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// newDemoCmd returns `corral demo`.
func newDemoCmd() *cobra.Command {
	cfg := demo.DefaultConfig()
	var jsonOut, noProgress bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replay a cache stampede against a real origin and compare strategies",
		Long: `demo replays a cache stampede: every goroutine of every app instance asks
for the same cold keys at the same instant, released by one barrier. Each
strategy runs on fresh keys, in turn, and the demo prints what the origin and
Redis went through: origin queries (loads), their peak concurrency and mean
duration, request latency (p50, p99, max), Redis commands, and errors
(failed requests or wrong values; every value is checked against the origin).

The origin is a real SQL database with 100,000 generated orders over 2,000
customers, queried with an aggregate per key: an embedded SQLite database by
default, or PostgreSQL with --pg (table corral_demo_orders, created and
seeded once). Redis is an embedded in-process server by default, or a real
one with --redis. Nothing needs to be installed for the defaults.

Strategies:
` + strategyHelp() + `
With --json, stdout holds exactly one JSON document; the progress bar goes to
stderr (--no-progress turns it off).`,
		Example: `  corral demo
  corral demo --redis redis://127.0.0.1:6379 --instances 8 --goroutines 500 --origin-latency 20ms
  corral demo --pg 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable' --keys 4 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if !noProgress {
				cfg.Progress = stderr
			}
			cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			report, err := demo.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if jsonOut {
				return report.WriteJSON(stdout)
			}
			if !isTerminal(stdout) {
				pterm.DisableColor()
			}
			return demo.Render(stdout, report)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.RedisURL, "redis", "", "Redis URL (redis:// or rediss://); default: an embedded in-process Redis")
	f.StringVar(&cfg.PostgresDSN, "pg", "", "PostgreSQL DSN to use as the origin instead of the embedded SQLite database")
	f.IntVar(&cfg.Instances, "instances", cfg.Instances, "independent app instances, each with its own Redis client and cache")
	f.IntVar(&cfg.Goroutines, "goroutines", cfg.Goroutines, "concurrent requests per instance")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "hot keys the requests are spread over (request i asks for key i mod keys)")
	f.DurationVar(&cfg.OriginLatency, "origin-latency", cfg.OriginLatency, "latency added to each origin query, modelling a remote database")
	f.StringSliceVar(&cfg.Strategies, "strategies", cfg.Strategies, "strategies to run, in order ("+strings.Join(demo.StrategyNames(), ", ")+")")
	f.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "time to live of the cached values")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "bound on each strategy's run; requests still running then count as errors")
	f.BoolVar(&jsonOut, "json", false, "print one JSON document on stdout instead of a table and charts")
	f.BoolVar(&noProgress, "no-progress", false, "do not draw the progress bar on stderr")
	return cmd
}

func strategyHelp() string {
	var b strings.Builder
	for _, s := range demo.Strategies() {
		fmt.Fprintf(&b, "  %-7s %s\n", s.Name(), s.Summary())
	}
	return b.String()
}

// isTerminal reports whether w is a terminal, so colours make sense.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
