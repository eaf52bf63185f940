package demo

import (
	"context"
	"fmt"
	"time"
)

// expiry keeps hot keys under steady load while they expire, again and
// again: every goroutine of every instance loops for Config.Duration,
// asking for its key (goroutine i, counted over all instances, asks for key
// i mod Keys) and pausing Config.Think between requests. With a TTL well
// below the duration, each key expires several times in the run, so the
// origin loads count the refreshes: about one per key per TTL for a cache
// that refreshes once, many for one that reloads on every miss.
type expiry struct{}

func (expiry) Name() string { return "expiry" }

func (expiry) Help() string {
	return "every goroutine asks in a loop for --duration, pausing --think, while hot keys expire every --ttl"
}

// Defaults: a TTL short enough for keys to expire several times in the
// default duration, and a stale window as long as the TTL, so corral serves
// the old value while one caller refreshes it.
func (expiry) Defaults(cfg Config) Config {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultExpiryTTL
	}
	if cfg.StaleTTL == nil {
		cfg.StaleTTL = new(cfg.TTL)
	}
	return cfg
}

func (expiry) Validate(cfg Config) error {
	if cfg.TTL >= cfg.Duration {
		return fmt.Errorf("demo: expiry: the TTL (%v) must be shorter than the duration (%v), or no key expires during the run", cfg.TTL, cfg.Duration)
	}
	return nil
}

func (expiry) Summary(cfg Config) string {
	pause := "without pausing"
	if cfg.Think > 0 {
		pause = fmt.Sprintf("pausing %v between requests", cfg.Think)
	}
	stale := "no stale window"
	if *cfg.StaleTTL > 0 {
		stale = fmt.Sprintf("corral's stale window %v", *cfg.StaleTTL)
	}
	return fmt.Sprintf("expiry: %d instances x %d goroutines request %d hot %s for %v, %s; TTL %v, %s",
		cfg.Instances, cfg.Goroutines, cfg.Keys, plural(cfg.Keys, "key", "keys"), cfg.Duration, pause, cfg.TTL, stale)
}

func (expiry) Requests(Config) int { return 0 }

func (expiry) Length(cfg Config) time.Duration { return cfg.Duration }

// Run starts every goroutine, waits until all are ready, then releases them
// together by closing one channel. Each loops until the deadline: a request,
// then a pause (cut short at the deadline). A request still running at the
// deadline finishes and counts; none starts after it. Latency counts from
// each request's own start.
func (expiry) Run(ctx context.Context, cfg Config, t *Trial) {
	t.together(func(inst Instance, key string, start time.Time) {
		deadline := start.Add(cfg.Duration)
		pause := time.NewTimer(time.Hour)
		defer pause.Stop()
		for {
			t.Request(ctx, inst, key, time.Now())
			left := time.Until(deadline)
			if left <= 0 || ctx.Err() != nil {
				return
			}
			if cfg.Think > 0 {
				// Think time: a paced client, not synchronisation.
				pause.Reset(min(cfg.Think, left))
				select {
				case <-pause.C:
				case <-ctx.Done():
					return
				}
				if !time.Now().Before(deadline) {
					return
				}
			}
		}
	})
}
