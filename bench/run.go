package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/redis/go-redis/v9"
)

// runner runs the trials of every scenario on one Redis server.
type runner struct {
	srv      *server
	logger   *slog.Logger
	progress *progress
	seq      int // trials run, for key namespaces
}

// recorder collects the requests of one trial: latency in µs in an HDR
// histogram, counts, and the first error. It is safe for concurrent use.
type recorder struct {
	mu       sync.Mutex
	hist     *hdrhistogram.Histogram
	requests int64
	errors   int64
	maxUS    int64 // the exact maximum (the histogram's is rounded up to its precision)
	firstErr error
}

// Latencies are kept in µs, from 1 µs to 10 min, with 3 significant digits.
func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1, 600_000_000, 3) }

func newRecorder() *recorder { return &recorder{hist: newHistogram()} }

func (r *recorder) record(took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	us := max(took.Microseconds(), 1)
	_ = r.hist.RecordValue(us)
	r.maxUS = max(r.maxUS, us)
	r.requests++
	if err != nil {
		r.errors++
		if r.firstErr == nil {
			r.firstErr = err
		}
	}
}

// trial is what one system's run of a scenario measured.
type trial struct {
	loads, peak  int64 // after the warm-up, if any
	warmLoads    int64 // the warm-up's
	nearHits     int64 // requests answered by a near cache, if hasNear
	failSafeHits int64 // requests answered from memory while Redis could not be used, if hasNear
	hasNear      bool
	rec          *recorder
	commands     map[string]int64 // sent by the clients (wire.go); nil when Redis was down
	commandTotal int64
	serverCalls  map[string]int64 // INFO commandstats, script-internal commands included
	serverTotal  int64
	elapsed      time.Duration
}

// instances makes the app instances of a trial, each with its own go-redis
// client, connected before the trial starts (so connection set-up is not
// part of the run). close closes them
// and their clients. wc, when not nil, counts the commands their clients
// send, from the systems' construction on (markStart): the harness's PING
// that connects each client is left out, a system's start-up commands are
// not.
func (r *runner) instances(ctx context.Context, sc *Scenario, sys System, o *origin, wc *wireCount, ns string, n int) (insts []Instance, closeAll func(), err error) {
	var clients []*redis.Client
	closeAll = func() {
		for _, in := range insts {
			_ = in.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}
	envs := make([]Env, n)
	for i := range envs {
		// ContextTimeoutEnabled, as corral's README recommends: corral then
		// reads hits in the caller's goroutine. The other go-redis users get
		// the same client; it changes nothing for calls without a deadline.
		opts := &redis.Options{Addr: r.srv.Addr, ContextTimeoutEnabled: true}
		load := func(ctx context.Context, key string) ([]byte, error) {
			return o.load(ctx, strings.TrimPrefix(key, ns)) // the origin knows keys without the namespace
		}
		envs[i] = Env{Addr: r.srv.Addr, Namespace: ns, TTL: sc.TTL, StaleTTL: sc.StaleTTL, Load: load, Logger: r.logger}
		if wc != nil {
			opts.Dialer, envs[i].Dial = wc.dial, wc.dialRueidis
		}
		c := redis.NewClient(opts)
		envs[i].Redis = c
		clients = append(clients, c)
		if err := c.Ping(ctx).Err(); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("bench: connect to Redis: %w", err)
		}
	}
	if wc != nil {
		// The harness's PINGs are not the systems': what they send from New on is.
		wc.markStart()
		if wc.serverStart, err = r.srv.commandStats(ctx); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	for _, env := range envs {
		in, err := sys.New(env)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("bench: %s: %w", sys.Name, err)
		}
		insts = append(insts, in)
	}
	return insts, closeAll, nil
}

// run runs one trial of a burst or steady scenario.
func (r *runner) run(ctx context.Context, sc *Scenario, sys System, vals *values) (*trial, error) {
	r.seq++
	ns := fmt.Sprintf("bench:%d:", r.seq)
	if err := r.srv.admin.FlushAll(ctx).Err(); err != nil {
		return nil, fmt.Errorf("bench: FLUSHALL: %w", err)
	}
	o := &origin{latency: sc.OriginLatency, values: vals}
	wc := &wireCount{}
	insts, closeAll, err := r.instances(ctx, sc, sys, o, wc, ns, sc.Instances)
	if err != nil {
		return nil, err
	}
	sent, before := commandStats(wc.start), wc.serverStart // from the systems' New on: their start-up commands count
	var warmLoads int64
	if sc.Warm {
		if err := r.warm(ctx, sc, insts, vals, ns); err != nil {
			closeAll()
			return nil, err
		}
		warmLoads = o.restartCount()
	}
	if sc.Outage {
		r.srv.Kill()
	}
	rec := newRecorder()
	near, safe, hasNear := nearHits(insts)
	start := time.Now()
	if sc.Workload == steady {
		r.steady(ctx, sc, insts, rec, vals, ns)
	} else {
		r.burst(ctx, sc, insts, rec, vals, ns)
	}
	t := &trial{rec: rec, elapsed: time.Since(start), warmLoads: warmLoads}
	if hasNear {
		after, afterSafe, _ := nearHits(insts)
		t.nearHits, t.failSafeHits, t.hasNear = int64(after-near), int64(afterSafe-safe), true
	}
	closeAll()
	t.loads, t.peak = o.loads.Load(), o.peak.Load()
	if sc.Outage {
		if err := r.srv.Restart(); err != nil {
			return nil, fmt.Errorf("bench: restart Redis after the outage: %w", err)
		}
		return t, nil
	}
	after, err := r.srv.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	t.serverCalls, t.serverTotal = after.sub(before, notCounted)
	t.commands, t.commandTotal = commandStats(wc.snapshot()).sub(sent, setUp)
	return t, nil
}

// nearCounter is an Instance that counts the requests its near cache
// answered (corral's Stats.NearHits) and those it answered from memory
// while Redis could not be used (Stats.FailSafeHits); ok is false when it
// has no near cache.
type nearCounter interface {
	nearHits() (hits, failSafe uint64, ok bool)
}

// nearHits sums the near hits and fail-safe hits of insts so far; ok is
// false when none of them has a near cache.
func nearHits(insts []Instance) (n, safe uint64, ok bool) {
	for _, in := range insts {
		if c, is := in.(nearCounter); is {
			m, s, has := c.nearHits()
			n, safe, ok = n+m, safe+s, ok || has
		}
	}
	return n, safe, ok
}

// check is the error of a request that returned other bytes than the
// origin's value for key.
func check(v []byte, err error, key string, vals *values) error {
	if err != nil {
		return err
	}
	if want := vals.get(key); !bytes.Equal(v, want) {
		return fmt.Errorf("bench: %s: got %d bytes, not the origin's %d", key, len(v), len(want))
	}
	return nil
}

func keyName(i int) string { return fmt.Sprintf("k%d", i) }

// burst releases every goroutine of every instance at once; latency counts
// from the release. With sc.Stall, Redis is paused just before.
func (r *runner) burst(ctx context.Context, sc *Scenario, insts []Instance, rec *recorder, vals *values, ns string) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	var start time.Time // written before release is closed
	i := 0
	for _, in := range insts {
		for range sc.Goroutines {
			key := keyName(i % sc.Keys)
			i++
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-release
				rctx, cancel := context.WithTimeout(ctx, sc.Timeout)
				defer cancel()
				v, err := in.Fetch(rctx, ns+key)
				rec.record(time.Since(start), check(v, err, key, vals))
			}()
		}
	}
	ready.Wait()
	var stalled chan error
	if sc.Stall > 0 {
		stalled = make(chan error, 1)
		go func() {
			stalled <- r.srv.admin.Do(ctx, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", sc.Stall.Seconds())).Err()
		}()
		time.Sleep(10 * time.Millisecond) // the server is asleep when the burst arrives
	}
	start = time.Now()
	close(release)
	done.Wait()
	if stalled != nil {
		if err := <-stalled; err != nil {
			rec.record(0, fmt.Errorf("bench: DEBUG SLEEP: %w", err))
		}
	}
}

// steady runs every goroutine in a loop until sc.Duration has passed: a
// request for a key (Zipf-distributed or uniform), then sc.Think. Latency
// counts from each request's own start.
func (r *runner) steady(ctx context.Context, sc *Scenario, insts []Instance, rec *recorder, vals *values, ns string) {
	var done sync.WaitGroup
	deadline := time.Now().Add(sc.Duration)
	g := 0
	for _, in := range insts {
		for range sc.Goroutines {
			g++
			rnd := rand.New(rand.NewPCG(uint64(g), 42))
			pick := func() int { return rnd.IntN(sc.Keys) }
			if sc.Zipf {
				z := rand.NewZipf(rnd, 1.1, 1, uint64(sc.Keys-1))
				pick = func() int { return int(z.Uint64()) }
			}
			done.Add(1)
			go func() {
				defer done.Done()
				for time.Now().Before(deadline) && ctx.Err() == nil {
					key := keyName(pick())
					rctx, cancel := context.WithTimeout(ctx, sc.Timeout)
					start := time.Now()
					v, err := in.Fetch(rctx, ns+key)
					rec.record(time.Since(start), check(v, err, key, vals))
					cancel()
					if sc.Think > 0 {
						time.Sleep(sc.Think) // a paced client, not synchronisation
					}
				}
			}()
		}
	}
	done.Wait()
}

// runScenario runs every system's trials of sc, round after round, in an
// order rotated each round, and sums them up.
func (r *runner) runScenario(ctx context.Context, sc *Scenario, syss []System) (ScenarioResult, error) {
	if sc.Workload == hitPath {
		return r.hitPath(ctx, sc, syss)
	}
	vals := newValues(sc.ValueSize)
	trials := make(map[string][]*trial)
	failed := make(map[string]string)
	runnable := runnableSystems(sc, syss)
	for round := range sc.Rounds {
		for k := range runnable {
			sys := runnable[(k+round)%len(runnable)]
			r.progress.step(fmt.Sprintf("%s %s %d/%d", sc.Name, sys.Name, round+1, sc.Rounds))
			if _, bad := failed[sys.Name]; bad {
				continue
			}
			t, err := r.run(ctx, sc, sys, vals)
			if err != nil {
				if ctx.Err() != nil {
					return ScenarioResult{}, ctx.Err()
				}
				failed[sys.Name] = err.Error()
				continue
			}
			trials[sys.Name] = append(trials[sys.Name], t)
		}
	}
	res := ScenarioResult{Name: sc.Name, Description: sc.Description, Setup: sc.Setup(), Rounds: sc.Rounds}
	for _, sys := range syss {
		sr := SystemResult{System: sys.Name}
		switch {
		case sys.status(sc) != "":
			sr.Status = sys.status(sc)
		case failed[sys.Name] != "":
			sr.Status = "failed: " + failed[sys.Name]
		default:
			summarize(&sr, trials[sys.Name], sc)
		}
		res.Results = append(res.Results, sr)
	}
	return res, nil
}

// warmUp runs one unmeasured trial of each system, before any is
// measured, of the first stampede scenario of scs (a short one, its
// origin cut to 1 ms): the process's own first use of the runtime, the
// network and each library is paid there, not by whichever system the
// first measured trial happens to be (corral's 20 ms p99 was 51 ms where
// its near-cache twin, the same protocol, had 31: it ran first). Nothing
// of it is recorded.
func (r *runner) warmUp(ctx context.Context, scs []*Scenario, syss []System) error {
	i := slices.IndexFunc(scs, func(sc *Scenario) bool { return sc.Workload == burst && sc.Stall == 0 })
	if i < 0 {
		return nil
	}
	sc := *scs[i]
	sc.OriginLatency = time.Millisecond
	vals := newValues(sc.ValueSize)
	for _, sys := range runnableSystems(&sc, syss) {
		if _, err := r.run(ctx, &sc, sys, vals); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// runnableSystems are the systems of syss that can run sc.
func runnableSystems(sc *Scenario, syss []System) []System {
	var out []System
	for _, s := range syss {
		if s.status(sc) == "" {
			out = append(out, s)
		}
	}
	return out
}

// summarize sums one system's trials up: origin loads are the most of any
// round (every round is listed), latency is over every request of every
// round, Redis commands are the mean per round.
func summarize(sr *SystemResult, ts []*trial, sc *Scenario) {
	if len(ts) == 0 {
		sr.Status = "failed: no trial ran"
		return
	}
	hist := newHistogram()
	var loads, peak, warmLoads, near, safe, reqs, errs, cmdTotal, serverTotal, maxUS int64
	var hasNear bool
	byName, serverByName := map[string]int64{}, map[string]int64{}
	var first error
	for _, t := range ts {
		sr.OriginLoadsPerRound = append(sr.OriginLoadsPerRound, t.loads)
		loads = max(loads, t.loads)
		peak = max(peak, t.peak)
		warmLoads = max(warmLoads, t.warmLoads)
		hist.Merge(t.rec.hist)
		maxUS = max(maxUS, t.rec.maxUS)
		reqs += t.rec.requests
		errs += t.rec.errors
		near += t.nearHits
		safe += t.failSafeHits
		hasNear = hasNear || t.hasNear
		if first == nil {
			first = t.rec.firstErr
		}
		cmdTotal += t.commandTotal
		for k, v := range t.commands {
			byName[k] += v
		}
		serverTotal += t.serverTotal
		for k, v := range t.serverCalls {
			serverByName[k] += v
		}
	}
	n := int64(len(ts))
	sr.OriginLoads = &loads
	sr.PeakOriginConcurrency = &peak
	if sc.Warm {
		sr.WarmupOriginLoads = &warmLoads
	}
	sr.LatencyMS = &Latency{
		P50: ms(min(hist.ValueAtQuantile(50), maxUS)), // the histogram rounds up to its precision
		P99: ms(min(hist.ValueAtQuantile(99), maxUS)),
		Max: ms(maxUS),
	}
	sr.Requests = &reqs
	if hasNear {
		sr.NearHits, sr.FailSafeHits = &near, &safe
	}
	answered := reqs - errs
	sr.Answered = &answered
	sr.Errors = &errs
	if first != nil {
		sr.FirstError = first.Error()
	}
	if sc.Workload == steady && reqs > 0 {
		var sum int64
		for _, t := range ts {
			sum += t.loads
		}
		per := float64(int(float64(sum)*1000/float64(reqs)*10+0.5)) / 10
		sr.LoadsPer1kRequests = &per
	}
	if !sc.Outage {
		sr.RedisCommands, sr.RedisCommandsByName = meanPerRound(cmdTotal, byName, n)
		sr.RedisServerCalls, sr.RedisServerCallsByName = meanPerRound(serverTotal, serverByName, n)
	}
}

// meanPerRound divides a total and its split over n rounds, rounded.
func meanPerRound(total int64, byName map[string]int64, n int64) (*int64, map[string]int64) {
	mean := (total + n/2) / n
	out := make(map[string]int64, len(byName))
	for k, v := range byName {
		out[k] = (v + n/2) / n
	}
	return &mean, out
}

// ms converts µs to ms, rounded to µs.
func ms(us int64) float64 { return float64(us) / 1000 }

var errNoHits = errors.New("bench: no hit measured")
