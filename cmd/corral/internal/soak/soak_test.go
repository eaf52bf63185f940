package soak_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/cmd/corral/internal/soak"
	"github.com/corralhq/corral/internal/redisproc"
)

// config is a soak whose workers are this test binary, re-executed: its
// TestMain runs them.
func config(t *testing.T) soak.Config {
	cfg := soak.DefaultConfig()
	cfg.WorkerCommand = func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
	cfg.Log = &lineLogger{t: t}
	cfg.WorkerStderr = &lineLogger{t: t}
	return cfg
}

func run(t *testing.T, cfg soak.Config) *soak.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := soak.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("soak.Run: %v", err)
	}
	t.Log(r.Summary())
	return r
}

// TestSoak runs a short soak with every kind of chaos on the soak's own
// redis-server and expects no violation.
func TestSoak(t *testing.T) {
	cfg := config(t)
	cfg.Duration = 6 * time.Second
	cfg.Processes = 3
	cfg.RestartEvery = 2 * time.Second // the first in [1s, 3s]: at least one in 6s
	r := run(t, cfg)
	var buf bytes.Buffer
	if err := r.WriteViolations(&buf, 50); err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) > 0 {
		t.Errorf("%d violations:\n%s", len(r.Violations), buf.String())
	}
	if r.Killed < 1 || r.RedisRestarts < 1 || r.Deletes < 1 || !r.OwnRedis {
		t.Errorf("not enough chaos: %d kills, %d Redis restarts, %d deletes (own Redis: %v); want at least 1 of each",
			r.Killed, r.RedisRestarts, r.Deletes, r.OwnRedis)
	}
	// The workers really worked, through Redis, failing open and
	// answering from memory around the restarts, and caching resumed
	// after them, as their breakers reported.
	if r.Calls < 1000 || r.Errors != 0 || r.Leased < cfg.Keys || r.FailOpen < 1 || r.Stats.FailOpens < 1 ||
		r.Stats.FailSafeHits < 1 || r.Stats.Hits < 1000 || r.Recoveries < 1 {
		t.Errorf("calls %d, errors %d, leased loads %d, fail-open loads %d, breaker recoveries %d, stats %+v",
			r.Calls, r.Errors, r.Leased, r.FailOpen, r.Recoveries, r.Stats)
	}
	if r.Leased > r.Bound {
		t.Errorf("%d leased loads over the bound %d", r.Leased, r.Bound)
	}
	// Invariant 5 counted the fail-open loads around the restarts.
	if r.OutageLoads < 1 || r.OutageMax < 1 || r.OutageMean <= 0 || r.OutageLoads > r.FailOpen {
		t.Errorf("fail-open loads %d, in restarts %d, per restart, key and worker: max %d, mean %v",
			r.FailOpen, r.OutageLoads, r.OutageMax, r.OutageMean)
	}
	if want := fmt.Sprintf("violations: %d", len(r.Violations)); !strings.Contains(r.Summary(), want) {
		t.Errorf("summary lacks %q: %s", want, r.Summary())
	}
}

// TestSoakCatchesNaive soaks plain cache-aside on a Redis the soak did not
// start (so it is never restarted): the checks must see the stampedes at
// every expiry, and the stale values a Delete cannot stop.
func TestSoakCatchesNaive(t *testing.T) {
	srv, err := redisproc.Start(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cfg := config(t)
	cfg.RedisURL = srv.URL()
	cfg.Strategy = soak.StrategyNaive
	cfg.Duration = 3 * time.Second
	cfg.Processes = 3
	r := run(t, cfg)
	if r.OwnRedis || r.RedisRestarts != 0 {
		t.Errorf("an external Redis was restarted: %+v", r)
	}
	if r.Leased <= r.Bound {
		t.Errorf("leased loads %d within the bound %d", r.Leased, r.Bound)
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Summary    map[string]any `json:"summary"`
		Violations []struct {
			Invariant int    `json:"invariant"`
			Message   string `json:"message"`
		} `json:"violations"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, buf.Bytes())
	}
	fleet, perProcess := 0, 0
	for _, v := range doc.Violations {
		switch {
		case v.Invariant == soak.InvLoads && strings.Contains(v.Message, "loads started within"):
			fleet++
		case v.Invariant == soak.InvLoads && strings.Contains(v.Message, "at once"):
			perProcess++
		}
	}
	if fleet == 0 || perProcess == 0 {
		t.Errorf("naive cache-aside: %d fleet-wide and %d per-process load violations; want both", fleet, perProcess)
	}
	if doc.Summary["violations"].(float64) != float64(len(r.Violations)) {
		t.Errorf("JSON summary counts %v violations, the report %d", doc.Summary["violations"], len(r.Violations))
	}
}

// TestSoakNeedsRedisServer: without --redis, a missing redis-server is a
// set-up error that says what to do.
func TestSoakNeedsRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cfg := config(t)
	_, err := soak.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "redis-server is not on PATH") || !strings.Contains(err.Error(), "--redis") {
		t.Fatalf("soak.Run without redis-server = %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		change func(*soak.Config)
		want   string
	}{
		{func(c *soak.Config) { c.Duration = 0 }, "duration must be positive"},
		{func(c *soak.Config) { c.Processes = 0 }, "at least 1 process"},
		{func(c *soak.Config) { c.TTL = time.Millisecond }, "TTL (1ms) must be at least 50ms"},
		{func(c *soak.Config) { c.Strategy = "seed" }, `unknown strategy "seed"`},
		{func(c *soak.Config) { c.KillEvery = -time.Second }, "must not be negative"},
	} {
		cfg := config(t)
		tc.change(&cfg)
		if _, err := soak.Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run = %v, want an error with %q", err, tc.want)
		}
	}
}

// lineLogger writes to the test log, a line at a time.
type lineLogger struct {
	mu  sync.Mutex // guards t's use and buf
	t   *testing.T
	buf []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}
