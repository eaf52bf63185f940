package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	core "github.com/corralhq/corral"
	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/corralhq/corral/internal/redisurl"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// Exit statuses of `corral check`.
const (
	exitCheckFailed = 1 // a guarantee would break, or Redis could not be checked
	exitUsage       = 2 // the command line is wrong
)

// checkFlags are corral check's flags.
type checkFlags struct {
	redis, prefix   string
	nearCache, json bool
	noShard         bool
	timeout         time.Duration
}

// newCheckCmd returns `corral check`.
func newCheckCmd() *cobra.Command {
	o := &checkFlags{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check a Redis for corral: version, Cluster, pub/sub, eviction policy, rights, round trip",
		Long: `check connects to --redis as the user in the URL, as a corral.Cache would,
and reports on each of these (corral.Check does the work; services can call
it at start-up), a long report wrapped at spaces under its text to 80
columns, or to the terminal's width on one:

  redis      the server's version (the oldest master's on a Cluster)
  mode       standalone, or cluster (N masters)
  pubsub     how notices go: sharded (SPUBLISH, SSUBSCRIBE), plain, or none
  eviction   maxmemory-policy and maxmemory of every master
  rights     EVAL, EVALSHA and the commands of corral's scripts, on keys P:*
  tracking   CLIENT TRACKING, CLIENT ID, __redis__:invalidate (near cache)
  rtt        median round-trip time of 10 PINGs
  verdict    ok, ok with warnings, or FAIL

It publishes an empty message on the channel P:probe and writes, then
deletes, the key P:probe (P is --prefix), as a Cache does at its first use.

A failure breaks a guarantee of corral's, or leaves nothing cached: Redis
unreachable or refusing the login; Redis older than 5.0 (the scripts write
after TIME); a replica, a Sentinel, or a Cluster node that is not answering
as a Cluster; a missing key or command right (those calls return
ErrPermission); a round trip of RedisTimeout (2s) or more.
A warning means corral works, doing less or at a cost: no channel rights
(waiters re-check on their own, within 250 ms of a commit), plain pub/sub
where SPUBLISH was refused, an eviction policy other than noeviction (an
evicted lease costs an extra load, an evicted entry is a miss, an evicted
revocation marker lets a load begun before a Delete store its older value
after it: the library warns the same), a policy the user may not read
(CONFIG GET), the near cache's rights missing with --near-cache, Redis 5, a
round trip of 100 ms or more.

Every flag can also be set by an environment variable: CORRAL_CHECK_ and
the flag's name in capitals, dashes as underscores (CORRAL_CHECK_REDIS,
CORRAL_CHECK_NEAR_CACHE). A flag on the command line wins over its
variable; a CORRAL_CHECK_ variable that is no flag's is a usage error. Give
a URL with a password through CORRAL_CHECK_REDIS rather than the command
line, which other users of the machine can read.

Exit status: 0 when nothing fails (warnings allowed), 1 on a failure or when
Redis could not be checked, 2 for a usage error. The password is never printed.
With --json, stdout holds one JSON document: the report (version, cluster,
masters, pubsub, policies, missing, rtt_ms, findings with topic, severity
and detail), plus server, ok and, when Redis could not be checked, error.`,
		Example: `  corral check --redis redis://127.0.0.1:6379
  corral check --redis 'rediss://app:secret@redis.internal:6380' --prefix myapp --near-cache
  corral check --redis 'redis://10.0.0.1:6379?addr=10.0.0.2:6379&addr=10.0.0.3:6379' --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(cmd, errorf("unexpected argument %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnvOf(cmd.Flags(), os.Environ(), "CORRAL_CHECK_", "check"); err != nil {
				return usageError(cmd, err)
			}
			return runCheck(cmd, *o)
		},
	}
	cmd.SetFlagErrorFunc(usageError)
	f := cmd.Flags()
	f.StringVar(&o.redis, "redis", "", "Redis URL: redis:// or rediss://, with user and password if needed; a Cluster as redis://h1:p1?addr=h2:p2 or redis://h1:p1,h2:p2 (required)")
	f.StringVar(&o.prefix, "prefix", core.DefaultPrefix, "the Prefix of the Caches to check for (corral.Options.Prefix)")
	f.BoolVar(&o.nearCache, "near-cache", false, "the Caches use a near cache: its missing rights are a warning")
	f.BoolVar(&o.noShard, "no-sharded-pubsub", false, "the Caches set DisableShardedPubSub")
	f.BoolVar(&o.json, "json", false, "print one JSON document on stdout")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long the whole check may take")
	return cmd
}

// usageError is the error of a wrong command line: exit status 2.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{exitUsage, errorf("%s: %w (see '%s --help')", cmd.Name(), err, cmd.CommandPath())}
}

// runCheck is corral check's RunE.
func runCheck(cmd *cobra.Command, o checkFlags) error {
	switch {
	case o.redis == "":
		return usageError(cmd, errors.New("--redis is required (or CORRAL_CHECK_REDIS)"))
	case o.timeout <= 0:
		return usageError(cmd, errorf("--timeout must be positive (got %v)", o.timeout))
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	uo, err := redisurl.Parse(ctx, o.redis)
	if err != nil {
		return usageError(cmd, errorf("--redis: %w", err))
	}
	uo.ContextTimeoutEnabled = true // ctx bounds every call
	if uo.MaxRetries == 0 {
		uo.MaxRetries = -1 // a refused connection is the answer; the URL's max_retries otherwise
	}
	rdb := redis.NewUniversalClient(&uo)
	defer rdb.Close()
	opts := &core.Options{Prefix: o.prefix, DisableShardedPubSub: o.noShard}
	if o.nearCache {
		opts.NearCache.Size = 1
	}
	report, err := core.Check(ctx, rdb, opts)
	if errors.Is(err, core.ErrInvalidOptions) {
		return usageError(cmd, err)
	}
	if uo.TLSConfig != nil && errors.Is(err, context.DeadlineExceeded) {
		// A TLS handshake with a server that does not speak TLS waits
		// for an answer that never comes.
		err = errorf("%w (the URL asks for TLS, rediss://: does the server speak TLS on that port?)", err)
	}
	server := redisurl.Redact(o.redis)
	if o.json {
		err = writeCheckJSON(cmd.OutOrStdout(), server, report, err)
	} else {
		err = writeCheck(cmd.OutOrStdout(), wrap.Columns(cmd.OutOrStdout()), server, report, err)
	}
	if err != nil {
		return &exitError{exitCheckFailed, err}
	}
	return nil
}

// checkError is the error corral check exits with when the report has
// failures: err (Report.Err's), said as text.
type checkError struct {
	err  error
	text string
}

func (e *checkError) Error() string { return e.text }
func (e *checkError) Unwrap() error { return e.err }

// verdict returns the error to exit with: checkErr (Redis not checked),
// or the report's failures, naming their topics.
func verdict(report *core.Report, checkErr error) error {
	if checkErr != nil {
		return errorf("%w", checkErr) // said without the library's "corral: "
	}
	err := report.Err()
	if err == nil {
		return nil
	}
	var failed []string
	for _, f := range report.Findings {
		if f.Severity == core.SeverityFailure {
			failed = append(failed, f.Topic)
		}
	}
	return &checkError{err, "check: FAIL: " + strings.Join(failed, ", ")}
}

// writeCheck prints the report, a line per topic (wrapped at spaces to
// width columns, indented under the text), and the verdict. It returns the
// error to exit with (see verdict).
func writeCheck(w io.Writer, width int, server string, report *core.Report, checkErr error) error {
	line := func(topic, text string) { fmt.Fprintln(w, wrap.Hanging(fmt.Sprintf("%-10s ", topic), text, width)) }
	line("server", server)
	if checkErr != nil {
		line("redis", "FAIL: "+strings.TrimPrefix(errorf("%w", checkErr).Error(), "check: "))
		line("verdict", "FAIL: Redis could not be checked")
		return verdict(report, checkErr)
	}
	var warned, failed []string
	for _, f := range report.Findings {
		switch f.Severity {
		case core.SeverityFailure:
			failed = append(failed, f.Topic)
			line(f.Topic, "FAIL: "+f.Detail)
		case core.SeverityWarning:
			warned = append(warned, f.Topic)
			line(f.Topic, "warning: "+f.Detail)
		default:
			line(f.Topic, f.Detail)
		}
	}
	switch {
	case len(failed) > 0:
		line("verdict", "FAIL: "+strings.Join(failed, ", ")+" would break a guarantee of corral's")
	case len(warned) > 0:
		line("verdict", "ok, with warnings: "+strings.Join(warned, ", "))
	default:
		line("verdict", "ok")
	}
	return verdict(report, nil)
}

// checkDocument is corral check's JSON document.
type checkDocument struct {
	Server string  `json:"server"`
	OK     bool    `json:"ok"`
	Error  string  `json:"error,omitempty"`
	RTTms  float64 `json:"rtt_ms"`
	*core.Report
}

// writeCheckJSON prints the report as one JSON document, and returns the
// error to exit with (see verdict).
func writeCheckJSON(w io.Writer, server string, report *core.Report, checkErr error) error {
	doc := checkDocument{Server: server, Report: report}
	err := verdict(report, checkErr)
	if checkErr == nil {
		doc.RTTms = float64(report.RTT) / float64(time.Millisecond)
	} else {
		doc.Error = err.Error()
	}
	doc.OK = err == nil
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if werr := enc.Encode(doc); werr != nil {
		return werr
	}
	return err
}
