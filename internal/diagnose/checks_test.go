package diagnose

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// checksFor returns Checks whose background work is queued for the test to
// run (run), logging into the returned buffer.
func checksFor(cfg ChecksConfig) (*Checks, *testkit.Buffer, func() int) {
	var buf testkit.Buffer
	var mu sync.Mutex
	var queued []func(context.Context)
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Prefix = "p"
	cfg.Go = func(f func(context.Context)) {
		mu.Lock()
		defer mu.Unlock()
		queued = append(queued, f)
	}
	run := func() int {
		mu.Lock()
		fs := queued
		queued = nil
		mu.Unlock()
		for _, f := range fs {
			f(context.Background())
		}
		return len(fs)
	}
	return NewChecks(cfg), &buf, run
}

// The rights are checked once, however many calls start the check: the
// pub/sub mode's cost is said, each refusal goes to Refused, and an error
// of the script to Missing. A Redis that fails at the pub/sub probe is not
// checked further.
func TestChecksRights(t *testing.T) {
	var refused []string
	var missing []error
	scriptErr := errors.New("NOPERM evalsha")
	for _, tc := range []struct {
		name    string
		pubsub  error
		rights  []string
		err     error
		refused int
		missing int
		log     string
	}{
		{"refusals", nil, []string{"NOPERM hset", "NOPERM del"}, nil, 2, 0, "may not publish on corral's channels"},
		{"script denied", nil, nil, scriptErr, 0, 1, "may not publish"},
		{"Redis failing", errors.New("timeout"), nil, nil, 0, 0, ""},
	} {
		refused, missing = nil, nil
		rightsRuns := 0
		c, buf, run := checksFor(ChecksConfig{
			PubSub: func(context.Context) (byte, string, error) { return wire.AnnounceNone, "", tc.pubsub },
			Rights: func(context.Context) ([]string, error) {
				rightsRuns++
				return tc.rights, tc.err
			},
			Missing: func(err error) { missing = append(missing, err) },
			Refused: func(msg string) { refused = append(refused, msg) },
		})
		c.Rights()
		c.Rights()
		if n := run(); n != 1 {
			t.Errorf("%s: %d checks started; want 1", tc.name, n)
		}
		c.Rights()
		if n := run(); n != 0 {
			t.Errorf("%s: a check started again after the first", tc.name)
		}
		if len(refused) != tc.refused || len(missing) != tc.missing || tc.missing > 0 && missing[0] != scriptErr {
			t.Errorf("%s: refused %q, missing %v", tc.name, refused, missing)
		}
		if tc.pubsub != nil && rightsRuns != 0 {
			t.Errorf("%s: rights tried on a failing Redis", tc.name)
		}
		if out := buf.String(); tc.log == "" && out != "" || !strings.Contains(out, tc.log) {
			t.Errorf("%s: logged %q; want %q", tc.name, out, tc.log)
		}
	}
}

// The eviction policy is read from a real server: one that evicts is
// warned of once, and the check, answered, is not started again.
func TestChecksPolicy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	c, buf, run := checksFor(ChecksConfig{
		ConfigGet: func(ctx context.Context, pattern string) (map[string]map[string]string, error) {
			m, err := rdb.ConfigGet(ctx, pattern).Result()
			return map[string]map[string]string{"": m}, err
		},
	})
	c.Policy()
	c.Policy()
	if n := run(); n != 1 {
		t.Fatalf("%d checks started; want 1", n)
	}
	c.Policy()
	if n := run(); n != 0 {
		t.Errorf("a check started again once answered")
	}
	if out := buf.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "maxmemory-policy=allkeys-lru") {
		t.Errorf("logged:\n%s", out)
	}
}

// A check Redis did not answer is not tried again before PolicyRetry; an
// answer without the policy is said (at info level) and not retried.
func TestChecksPolicyRetry(t *testing.T) {
	reads := 0
	var answer error = errors.New("dial tcp: connection refused")
	c, buf, run := checksFor(ChecksConfig{
		ConfigGet: func(context.Context, string) (map[string]map[string]string, error) {
			reads++
			if answer != nil {
				return nil, answer
			}
			return map[string]map[string]string{"n1": {}}, nil
		},
	})
	c.Policy()
	run()
	c.Policy()
	if n := run(); n != 0 || reads != 1 {
		t.Fatalf("tried again at once (%d reads)", reads)
	}
	c.policyNext.Store(1) // PolicyRetry passed
	answer = nil
	c.Policy()
	run()
	c.Policy()
	if n := run(); n != 0 || reads != 2 {
		t.Errorf("%d reads; want 2: the answer without a policy ends the checks", reads)
	}
	if out := buf.String(); !strings.Contains(out, "level=INFO") || !strings.Contains(out, "answered without it") {
		t.Errorf("logged:\n%s", out)
	}
}

// Check's own pieces: a nil client, however typed, and the grades' names.
func TestNilClientAndSeverity(t *testing.T) {
	var typed *redis.Client
	if !NilClient(nil) || !NilClient(typed) || NilClient(redis.NewClient(&redis.Options{})) {
		t.Error("NilClient: want true for nil and a nil *redis.Client only")
	}
	for s, want := range map[Severity]string{OK: "ok", Warning: "warning", Failure: "failure", 3: "Severity(3)", -1: "Severity(-1)"} {
		if s.String() != want {
			t.Errorf("%d: %q; want %q", int(s), s.String(), want)
		}
	}
}

// A Report's Err names its failures once, under ErrCheckFailed, and its
// JSON says each grade by name (`corral check --json`).
func TestReportErrAndJSON(t *testing.T) {
	r := &Report{Missing: []string{}}
	if err := r.Err(); err != nil {
		t.Errorf("Err of no findings: %v", err)
	}
	r.add("redis", OK, "7.2")
	r.add("rights", Failure, "missing: %s", "EVALSHA")
	r.add("rtt", Failure, "slow")
	err := r.Err()
	if !errors.Is(err, ErrCheckFailed) || err.Error() != "corral: Redis check failed: rights: missing: EVALSHA; rtt: slow" {
		t.Errorf("Err = %v; want ErrCheckFailed naming both failures, corral: once", err)
	}
	out, err := json.Marshal(Report{Findings: []Finding{{"eviction", Warning, "d"}}})
	want := `{"version":"","cluster":false,"masters":0,"pubsub":"","missing":null,"rtt_ns":0,` +
		`"findings":[{"topic":"eviction","severity":"warning","detail":"d"}]}`
	if err != nil || string(out) != want {
		t.Errorf("JSON: %s, %v; want %s", out, err, want)
	}
}

// Check says why a Redis that does not answer its PING could not be
// checked (the PING fails: Run is not tried).
func TestCheckPings(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	srv.Stop()
	_, err := Check(context.Background(), Config{Client: rdb, Prefix: "p", Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "check: Redis unreachable") {
		t.Errorf("Check of a stopped server: %v; want it unreachable", err)
	}
}
