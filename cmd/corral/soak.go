package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/corralhq/corral/cmd/corral/internal/soak"
	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// exitError is an error with the exit status main should use.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// Exit statuses of `corral soak`.
const (
	exitViolation = 1 // an invariant broke
	exitSetup     = 2 // the soak could not run
)

// newSoakCmd returns `corral soak`.
func newSoakCmd() *cobra.Command {
	defaults := soak.DefaultConfig()
	cfg, o := &defaults, &soakFlags{}
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Hammer corral from many processes while killing them, restarting Redis and deleting keys; check invariants",
		Long: fmt.Sprintf(`soak runs --processes worker processes (this binary, re-executed) that
hammer --keys keys for --duration, each with --goroutines callers, each with
its own Redis client and corral.Cache, reading through a shared origin: a
small HTTP server in this process that keeps a version per key, answers
after --origin-latency and records every load. Meanwhile, on a schedule
drawn from --seed:

  - about every --kill-every a random worker is killed (SIGKILL) and a new
    one started;
  - about every --delete-every a random key's version is bumped at the origin
    and the key deleted through this process's own Cache;
  - about every --restart-every Redis is killed, kept down --redis-downtime,
    and started again, empty, on the same port: only when the soak started
    it itself, that is without --redis. Then a private redis-server (which
    must be on PATH) runs on a free loopback port and is stopped at the end.

The workers run corral with RedisTimeout %v, LeaseTTL %v, a TTL of --ttl
with a stale-while-revalidate window as long (so no early refresh),
Jitter %v, BreakerCooldown %v and fail-open on; every Fetch has a %v
deadline. Then it checks five invariants:

  1. Loads per key per refresh <= 1, plus 1 per takeover.
     (a) Fleet-wide: for every key, in every window of TTL x (1 - Jitter) - 5ms
     (shorter than any soft TTL) that starts at a load, the loads corral ran
     under the key's lease (corral.IsFailOpen false in the loader) number at
     most 1 plus the events in [window start - LeaseTTL, last load]: Deletes
     of the key, Redis restarts, takeovers (a killed worker that had started
     a load of the key in its last 2s, or a worker stopping at the end whose
     Close cut a load of the key short) and workers in Redis trouble (a
     failed Redis call, open breaker, lost lease or rejected commit in the
     last %v) that were loading the key (a failed commit lets the next
     caller load).
     (b) Per process, fail-open included: no worker has more than 2 loads of
     a key at the origin at once (one flight, one background refresh), plus
     1 per lease-breaking event (Delete, Redis restart, the worker in
     trouble) in the LeaseTTL before.
  2. No value older than a Delete after it returned: a Fetch that started
     after Delete(key) returned nil returns at least the version bumped
     before that Delete, unless it joined an in-process flight of its worker
     begun before the Delete returned, or was answered from its worker's
     memory (fail-safe) while it could not use Redis: around a Redis
     restart, between Redis going down and %v after it answered (the worker
     cannot use Redis, nor see the Delete, until its recovery probe sees
     Redis), or while the worker's own breaker was open (a stall), with
     what a fail-open load of the worker returned at most min(1s, TTL) +
     100ms before (both counted, not violations). A stale answer from
     memory at any other time is a violation.
  3. No caller past its deadline: every Fetch returns within %v + %v.
  4. No error: fail-open is on and the origin never fails, so every Fetch
     returns a value (a killed worker's calls just stop), and no worker exits
     or hangs by itself.
  5. Fail-open loads per key per worker per Redis restart <= %d: a worker's
     loads of a key that corral called directly (corral.IsFailOpen in the
     loader) that began between Redis going down and %v after it answered
     again (the worker's recovery probe asks within 150ms, its two PINGs
     each take up to RedisTimeout on a busy machine, plus 100ms). A load
     counts for the latest restart before it, once. While Redis is down, a
     process serves from memory what a fail-open load returned for H =
     min(1s, TTL), then loads again: so a restart that keeps Redis down
     longer than 2H - 150ms allows one more per H.

It prints a summary on stdout, wrapped at spaces to 80 columns or to the
terminal's width (--json: one JSON document), each violation on stderr,
and exits 1 on any violation, 2 when the soak could not run (no
redis-server, Redis unreachable, a worker that would not start).`,
			soak.RedisTimeout, soak.LeaseTTL, soak.Jitter, soak.BreakerCooldown, soak.Deadline,
			time.Second, soak.RecoveryGrace, soak.Deadline, soak.DeadlineSlack, soak.FailOpenPerRestart, soak.RecoveryGrace),
		Example: `  corral soak
  corral soak --duration 1m --processes 8 --seed 42 -v
  corral soak --redis redis://127.0.0.1:6379 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSoak(cmd, *cfg, *o) },
	}
	o.define(cmd, cfg)
	return cmd
}

// runSoak is corral soak's RunE: a worker's run, or the orchestrator's.
func runSoak(cmd *cobra.Command, cfg soak.Config, o soakFlags) error {
	// go-redis logs every failed dial, and the soak restarts Redis
	// on purpose: what matters is in the report.
	redis.SetLogger(quietLogger{})
	if o.worker {
		return soak.RunWorker(cmd.Context(), os.Getenv(soak.WorkerEnv), cmd.InOrStdin(), cmd.OutOrStdout())
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	self, err := os.Executable()
	if err != nil {
		return &exitError{exitSetup, errorf("soak: cannot find this program to start workers: %w", err)}
	}
	cfg.WorkerCommand = func() *exec.Cmd { return exec.Command(self, "soak", "--worker") }
	cfg.WorkerStderr = stderr
	if o.verbose {
		cfg.Log = stderr
	} else if drawProgress(stderr, o.progress, o.noProgress) {
		cfg.Progress = stderr
	}
	report, err := soak.Run(cmd.Context(), cfg)
	if err != nil {
		return &exitError{exitSetup, err}
	}
	if err := report.WriteViolations(stderr, 20); err != nil {
		return err
	}
	if o.jsonOut {
		err = report.WriteJSON(stdout)
	} else {
		_, err = fmt.Fprintln(stdout, wrap.Hanging("", report.Summary(), wrap.Columns(stdout)))
	}
	if err != nil {
		return err
	}
	if n := len(report.Violations); n > 0 {
		return &exitError{exitViolation, errorf("soak: %d invariant violations", n)}
	}
	return nil
}

// soakFlags are corral soak's flags that are not the soak's Config.
type soakFlags struct {
	jsonOut, noProgress, progress, verbose, worker bool
}

// define declares corral soak's flags on cmd, into cfg and o.
func (o *soakFlags) define(cmd *cobra.Command, cfg *soak.Config) {
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to hammer, chaos included")
	f.IntVar(&cfg.Processes, "processes", cfg.Processes, "worker processes running at any time")
	f.StringVar(&cfg.RedisURL, "redis", "", "Redis URL (never restarted); default: a private redis-server from PATH, restarted during the soak")
	f.IntVar(&cfg.Goroutines, "goroutines", cfg.Goroutines, "concurrent callers per worker process")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "keys the callers pick from at random")
	f.DurationVar(&cfg.OriginLatency, "origin-latency", cfg.OriginLatency, "latency of each origin load")
	f.DurationVar(&cfg.Think, "think", cfg.Think, "each caller's pause between its Fetch calls")
	f.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "soft TTL of cached values (the stale window is as long)")
	f.DurationVar(&cfg.KillEvery, "kill-every", cfg.KillEvery, "average interval between worker kills (0: none)")
	f.DurationVar(&cfg.DeleteEvery, "delete-every", cfg.DeleteEvery, "average interval between Deletes (0: none)")
	f.DurationVar(&cfg.RestartEvery, "restart-every", cfg.RestartEvery, "average interval between Redis restarts, without --redis (0: none)")
	f.DurationVar(&cfg.RedisDowntime, "redis-downtime", cfg.RedisDowntime, "how long Redis stays down at each restart")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the chaos schedule (default: random, printed in the summary)")
	f.BoolVar(&o.jsonOut, "json", false, "print one JSON document on stdout instead of the summary")
	f.BoolVar(&o.noProgress, "no-progress", false, "do not draw the progress bar on stderr")
	f.BoolVar(&o.progress, "progress", false, "draw the progress bar on stderr even when it is not a terminal")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log each chaos event on stderr (instead of the progress bar)")
	// Hidden: the worker role of this binary, and a broken strategy that
	// shows the checks catch a stampeding cache.
	f.BoolVar(&o.worker, "worker", false, "run as a soak worker (configured by the orchestrator)")
	f.StringVar(&cfg.Strategy, "strategy", cfg.Strategy, "corral, or naive (plain cache-aside) to see the checks fail")
	_ = f.MarkHidden("worker")
	_ = f.MarkHidden("strategy")
}
