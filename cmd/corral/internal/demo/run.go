package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// Run runs the demo: it opens the origin and Redis, runs the scenario once
// per strategy, in cfg.Strategies order, each on fresh keys, and reports
// what happened. Errors are those of set-up (bad settings, an unreachable
// Redis or database); a request that fails during a run is counted in its
// Result, not returned.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	cfg, sc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}

	rs, err := openRedis(ctx, cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	defer rs.Close()

	origin, err := openOrigin(ctx, cfg.PostgresDSN)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, closeErr("origin", origin.Close())) }()

	keys := hotKeys(cfg.Keys)
	expected := make(map[string][]byte, len(keys))
	for _, k := range keys {
		v, err := origin.Aggregate(ctx, k.customer)
		if err != nil {
			return nil, err
		}
		expected[k.name] = v
	}

	report := &Report{Config: ReportConfig{
		Scenario:            sc.Name(),
		Redis:               rs.Label,
		Origin:              origin.Label,
		OriginRows:          orders,
		Instances:           cfg.Instances,
		Goroutines:          cfg.Goroutines,
		Keys:                cfg.Keys,
		OriginLatencyMS:     durMS(cfg.OriginLatency),
		TTLSeconds:          cfg.TTL.Seconds(),
		StaleTTLSeconds:     cfg.StaleTTL.Seconds(),
		Strategies:          cfg.Strategies,
		RequestsPerStrategy: sc.Requests(cfg),
	}, Summary: sc.Summary(cfg)}
	if d := sc.Length(cfg); d > 0 {
		report.Config.DurationSeconds = new(d.Seconds())
		report.Config.ThinkMS = new(durMS(cfg.Think))
	}
	ns := "corral-demo:" + runID() + ":"
	for _, name := range cfg.Strategies {
		st, _ := LookupStrategy(name)
		tr := &trialRun{cfg: cfg, scenario: sc, strategy: st, redis: rs,
			origin: origin, keys: keys, expected: expected, ns: ns}
		res, err := tr.run(ctx)
		if err != nil {
			return nil, err
		}
		report.Results = append(report.Results, res)
	}
	return report, nil
}

// runID returns a random id that keeps the keys of one run apart from
// every other run's on a shared Redis.
func runID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func closeErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("demo: close %s: %w", what, err)
}
