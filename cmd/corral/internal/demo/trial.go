package demo

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/cmd/corral/internal/termbar"
)

// Trial is one strategy's run of a scenario: the app instances, the hot
// keys, and the record of every request.
type Trial struct {
	Instances  []Instance
	Keys       []string // the logical hot keys
	Goroutines int      // per instance

	expected map[string][]byte // the origin's answer for each key

	began     atomic.Int64 // time.Now().UnixNano() at Begin, 0 before; for the progress bar
	completed atomic.Int64 // requests returned, for the progress bar
	errors    atomic.Int64

	mu        sync.Mutex      // guards latencies, firstErr
	latencies []time.Duration // one per request returned
	firstErr  error
}

// Begin marks the start of the requests and returns it. A scenario calls it
// once, as it releases its goroutines.
func (t *Trial) Begin() time.Time {
	now := time.Now()
	t.began.Store(now.UnixNano())
	return now
}

// elapsed is the time since Begin, 0 before.
func (t *Trial) elapsed() time.Duration {
	b := t.began.Load()
	if b == 0 {
		return 0
	}
	return time.Since(time.Unix(0, b))
}

// Request asks inst for key and records the request: its latency from
// start, and an error when Fetch failed or returned other bytes than the
// origin's answer for key.
func (t *Trial) Request(ctx context.Context, inst Instance, key string, start time.Time) {
	v, err := inst.Fetch(ctx, key)
	took := time.Since(start)
	if err == nil && !bytes.Equal(v, t.expected[key]) {
		err = fmt.Errorf("demo: %s: got %q, want %q", key, v, t.expected[key])
	}
	if err != nil {
		t.errors.Add(1)
	}
	t.mu.Lock()
	t.latencies = append(t.latencies, took)
	if err != nil && t.firstErr == nil {
		t.firstErr = err
	}
	t.mu.Unlock()
	t.completed.Add(1)
}

// trialRun is everything one strategy's run needs.
type trialRun struct {
	cfg      Config
	scenario Scenario
	strategy Strategy
	redis    *redisServer
	origin   *Origin
	keys     []hotKey
	expected map[string][]byte
	ns       string // the run's key namespace
}

// run runs the strategy: it builds one client and Instance per app
// instance, lets the scenario send the requests, then closes everything and
// sums up what the origin and Redis went through.
func (r *trialRun) run(ctx context.Context) (res Result, err error) {
	m := &meter{origin: r.origin, latency: r.cfg.OriginLatency}
	t := &Trial{Goroutines: r.cfg.Goroutines, expected: r.expected}
	for _, k := range r.keys {
		t.Keys = append(t.Keys, k.name)
	}
	open := &opened{strategy: r.strategy.Name()}
	defer func() {
		if cerr := open.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := r.start(t, open, r.env(m)); err != nil {
		return Result{}, err
	}
	if err := r.drive(ctx, t); err != nil {
		return Result{}, err
	}
	// Close the instances, then their clients, so every command sent on
	// behalf of the run is counted.
	if err := open.close(); err != nil {
		return Result{}, err
	}
	return r.result(t, m, open.counters), nil
}

// env is what the run's instances share: their namespace, TTLs, logger,
// and the origin, metered by m.
func (r *trialRun) env(m *meter) Env {
	customerOf := make(map[string]int64, len(r.keys))
	for _, k := range r.keys {
		customerOf[k.name] = k.customer
	}
	return Env{
		Namespace: r.ns + r.strategy.Name() + ":",
		TTL:       r.cfg.TTL,
		StaleTTL:  *r.cfg.StaleTTL,
		Logger:    r.cfg.logger(),
		Load: func(ctx context.Context, key string) ([]byte, error) {
			c, ok := customerOf[key]
			if !ok {
				return nil, fmt.Errorf("demo: no customer for key %q", key)
			}
			return m.load(ctx, c)
		},
	}
}

// opened is what a run opened: Redis clients, with their command counters,
// and the strategy's instances.
type opened struct {
	strategy string
	counters []*commandCounter // one per instance
	closers  []func() error    // in the order opened; closed in reverse
}

// close closes everything opened, last first, and returns the first error.
func (o *opened) close() error {
	var first error
	for i := len(o.closers) - 1; i >= 0; i-- {
		if err := o.closers[i](); err != nil && first == nil {
			first = fmt.Errorf("demo: %s: close: %w", o.strategy, err)
		}
	}
	o.closers = nil
	return first
}

// start opens cfg.Instances instances of the strategy, each on a Redis
// client of its own, into t.
func (r *trialRun) start(t *Trial, open *opened, env Env) error {
	for range r.cfg.Instances {
		client, n := r.redis.newClient()
		open.closers = append(open.closers, client.Close)
		open.counters = append(open.counters, n)
		env.Redis = client
		inst, err := r.strategy.NewInstance(env)
		if err != nil {
			return err
		}
		open.closers = append(open.closers, inst.Close)
		t.Instances = append(t.Instances, inst)
	}
	return nil
}

// drive runs the scenario on t, with a progress bar.
func (r *trialRun) drive(ctx context.Context, t *Trial) error {
	length := r.scenario.Length(r.cfg)
	rctx, cancel := context.WithTimeout(ctx, length+r.cfg.Timeout)
	defer cancel()
	var bar *termbar.Bar
	if length > 0 {
		bar = termbar.Elapsed(r.cfg.Progress, r.strategy.Name(), length, t.elapsed)
	} else {
		bar = termbar.Count(r.cfg.Progress, r.strategy.Name(), int64(r.scenario.Requests(r.cfg)), t.completed.Load)
	}
	r.scenario.Run(rctx, r.cfg, t)
	bar.Stop()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("demo: %s: %w", r.strategy.Name(), err)
	}
	return nil
}

// result is what the run measured, once its instances and clients are
// closed.
func (r *trialRun) result(t *Trial, m *meter, counters []*commandCounter) Result {
	var commands uint64
	for i, inst := range t.Instances {
		commands += counters[i].Load() + inst.UnhookedCommands()
	}
	res := Result{
		Strategy:              r.strategy.Name(),
		Requests:              len(t.latencies),
		OriginLoads:           m.loads.Load(),
		PeakOriginConcurrency: m.peak.Load(),
		OriginMS:              roundMS(m.meanMS()),
		LatencyMS:             summarize(t.latencies),
		RedisCommands:         commands,
		Errors:                t.errors.Load(),
	}
	if t.firstErr != nil {
		res.FirstError = t.firstErr.Error()
	}
	return res
}

// together runs body on every goroutine of every instance at once:
// goroutine i, counted over all instances, asks for key i mod Keys. It starts
// them all, waits until each is ready, marks the start (Begin) and releases
// them by closing one channel, then waits until every body has returned.
// start, the release time, is the same for every body.
func (t *Trial) together(body func(inst Instance, key string, start time.Time)) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	var start time.Time // written before release is closed, read after
	i := 0
	for _, inst := range t.Instances {
		for range t.Goroutines {
			key := t.Keys[i%len(t.Keys)]
			i++
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-release
				body(inst, key, start)
			}()
		}
	}
	ready.Wait()
	start = t.Begin()
	close(release)
	done.Wait()
}
