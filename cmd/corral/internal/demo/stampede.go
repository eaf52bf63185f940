package demo

import (
	"context"
	"fmt"
	"time"
)

// stampede sends one request from every goroutine of every instance, all at
// once, on cold keys: the moment after a deploy, a flush or a hot key's
// expiry. Goroutine i (counted over all instances) asks for key i mod Keys.
type stampede struct{}

func (stampede) Name() string { return "stampede" }

func (stampede) Help() string {
	return "every goroutine of every instance asks once, all released at the same instant, for cold keys"
}

// Defaults: values outlive the run (a shared Redis cleans up after it), and
// no stale window, which a cold stampede never reaches.
func (stampede) Defaults(cfg Config) Config {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.StaleTTL == nil {
		cfg.StaleTTL = new(time.Duration(0))
	}
	return cfg
}

func (stampede) Validate(Config) error { return nil }

func (stampede) Summary(cfg Config) string {
	return fmt.Sprintf("stampede: %d requests at once (%d instances x %d goroutines) on %d cold %s",
		cfg.Requests(), cfg.Instances, cfg.Goroutines, cfg.Keys, plural(cfg.Keys, "key", "keys"))
}

func (stampede) Requests(cfg Config) int { return cfg.Requests() }

func (stampede) Length(Config) time.Duration { return 0 }

// Run starts every goroutine, waits until all are ready, then releases them
// together by closing one channel. Latency counts from that release.
func (stampede) Run(ctx context.Context, _ Config, t *Trial) {
	t.together(func(inst Instance, key string, start time.Time) {
		t.Request(ctx, inst, key, start)
	})
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
