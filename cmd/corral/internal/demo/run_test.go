package demo_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/cmd/corral/internal/demo"
	"github.com/corralhq/corral/internal/redistest"
	_ "github.com/lib/pq"
)

// TestRealRedis runs every strategy against a private redis-server and
// checks the report against the contract and against what each strategy
// must show.
func TestRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := smallConfig()
	cfg.RedisURL = srv.URL()
	doc := run(t, cfg)
	byName := results(t, doc)

	conf := doc["config"].(map[string]any)
	if conf["redis"] != srv.URL() || conf["origin"] != "ql (embedded)" {
		t.Errorf("config redis, origin = %v, %v; want %s, ql (embedded)", conf["redis"], conf["origin"], srv.URL())
	}
	if got := num(t, conf, "origin_latency_ms"); got != 30 {
		t.Errorf("config origin_latency_ms = %v, want 30", got)
	}
	for _, name := range []string{"naive", "seed", "corral"} {
		res, ok := byName[name]
		if !ok {
			t.Fatalf("no result for %s", name)
		}
		if got := num(t, res, "requests"); got != float64(cfg.Instances*cfg.Goroutines) {
			t.Errorf("%s requests = %v, want %d", name, got, cfg.Instances*cfg.Goroutines)
		}
		p50, p99, maxMS := num(t, res, "latency_ms", "p50"), num(t, res, "latency_ms", "p99"), num(t, res, "latency_ms", "max")
		if !(p50 <= p99 && p99 <= maxMS) {
			t.Errorf("%s latency p50 %v, p99 %v, max %v: not in order", name, p50, p99, maxMS)
		}
		if num(t, res, "origin_loads") > 0 && num(t, res, "origin_ms") < 30 {
			t.Errorf("%s origin_ms = %v, below the added 30 ms", name, num(t, res, "origin_ms"))
		}
		if num(t, res, "redis_commands") <= 0 {
			t.Errorf("%s redis_commands = %v, want > 0", name, num(t, res, "redis_commands"))
		}
	}
	checkCorral(t, byName["corral"], cfg.Keys)
	if n, c := num(t, byName["naive"], "origin_loads"), num(t, byName["corral"], "origin_loads"); n < c {
		t.Errorf("naive origin_loads %v < corral's %v", n, c)
	}
	if got := num(t, byName["naive"], "errors"); got != 0 {
		t.Errorf("naive errors = %v, want 0", got)
	}
}

// TestEmbedded runs the default set-up: an in-process Redis and ql.
func TestEmbedded(t *testing.T) {
	cfg := smallConfig()
	doc := run(t, cfg)
	conf := doc["config"].(map[string]any)
	if conf["redis"] != "embedded" {
		t.Errorf("config redis = %v, want embedded", conf["redis"])
	}
	checkCorral(t, results(t, doc)["corral"], cfg.Keys)
}

// pgDSNEnv names the variable that points the PostgreSQL test elsewhere.
const pgDSNEnv = "CORRAL_TEST_PG_DSN"

// TestPostgres runs corral against a real redis-server with PostgreSQL as
// the origin.
func TestPostgres(t *testing.T) {
	dsn := os.Getenv(pgDSNEnv)
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("postgres", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		_ = db.Close()
	}
	if err != nil {
		t.Fatalf("cannot connect to PostgreSQL at %s: %v\n"+
			"This test needs a PostgreSQL server; set %s to its DSN.", dsn, err, pgDSNEnv)
	}

	srv := redistest.Start(t)
	cfg := smallConfig()
	cfg.RedisURL, cfg.PostgresDSN = srv.URL(), dsn
	cfg.Strategies = []string{"naive", "corral"}
	doc := run(t, cfg)
	if got := doc["config"].(map[string]any)["origin"]; got != "postgres" {
		t.Errorf("config origin = %v, want postgres", got)
	}
	byName := results(t, doc)
	checkCorral(t, byName["corral"], cfg.Keys)
	if got := num(t, byName["naive"], "errors"); got != 0 {
		t.Errorf("naive errors = %v, want 0", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*demo.Config)
		want   string // in the error
	}{
		"unknown strategy":   {func(c *demo.Config) { c.Strategies = []string{"naive", "bogus"} }, `unknown strategy "bogus"`},
		"duplicate strategy": {func(c *demo.Config) { c.Strategies = []string{"corral", "corral"} }, "listed twice"},
		"no strategy":        {func(c *demo.Config) { c.Strategies = nil }, "no strategy"},
		"no instances":       {func(c *demo.Config) { c.Instances = 0 }, "instances"},
		"keys > requests":    {func(c *demo.Config) { c.Instances, c.Goroutines, c.Keys = 1, 2, 3 }, "keys"},
		"negative latency":   {func(c *demo.Config) { c.OriginLatency = -time.Second }, "latency"},
		"unknown scenario":   {func(c *demo.Config) { c.Scenario = "bogus" }, `unknown scenario "bogus" (known: stampede, expiry)`},
		"negative TTL":       {func(c *demo.Config) { c.TTL = -time.Second }, "TTL"},
		"negative stale TTL": {func(c *demo.Config) { c.StaleTTL = new(-time.Second) }, "stale TTL"},
		"zero duration":      {func(c *demo.Config) { c.Scenario, c.Duration = "expiry", 0 }, "duration must be positive"},
		"negative duration":  {func(c *demo.Config) { c.Scenario, c.Duration = "expiry", -time.Second }, "duration must be positive"},
		"negative think":     {func(c *demo.Config) { c.Scenario, c.Think = "expiry", -time.Millisecond }, "think"},
		"expiry TTL >= duration": {func(c *demo.Config) {
			c.Scenario, c.TTL, c.Duration = "expiry", 5*time.Second, 5*time.Second
		}, "must be shorter than the duration"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := demo.DefaultConfig()
			tc.change(&cfg)
			_, err := demo.Run(context.Background(), cfg)
			if err == nil || !strings.HasPrefix(err.Error(), "demo: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error starting with \"demo: \" about %q", err, tc.want)
			}
		})
	}
}

func TestUnreachableRedis(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://:secret@" + srv.Addr
	srv.Kill()
	cfg := smallConfig()
	cfg.RedisURL = url
	_, err := demo.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis") {
		t.Fatalf("Run = %v, want a cannot-reach error", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

func TestUnreachablePostgres(t *testing.T) {
	cfg := smallConfig()
	cfg.PostgresDSN = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"
	_, err := demo.Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "demo: postgres: cannot connect") {
		t.Fatalf("Run = %v, want a cannot-connect error", err)
	}
}
