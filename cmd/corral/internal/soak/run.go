package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/cmd/corral/internal/termbar"
	"github.com/corralhq/corral/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// run is one soak in progress.
type run struct {
	cfg    Config
	epoch  time.Time // wall clock only (no monotonic reading): workers share it
	seed   uint64
	prefix string

	redisURL string
	redis    *redisproc.Server // nil with an external Redis
	dir      string            // the private Redis's working directory
	origin   *origin
	rdb      *redis.Client // the orchestrator's, for Deletes
	cache    *corral.Cache

	col collector

	mu       sync.Mutex // guards the fields below
	live     map[int]*proc
	all      []*proc
	nextID   int
	kills    []Kill
	stopped  time.Duration // when stopAll began
	deletes  []Delete
	outages  []Outage
	failures []Failure
	fatal    error              // a setup failure during the run: it is cut short
	abort    context.CancelFunc // stops the chaos

	watchers sync.WaitGroup // one per proc, recording unexpected exits
}

// Run runs a soak and returns its report; the report's Violations say
// whether an invariant broke. An error means the soak could not be run
// (set-up failed, or ctx ended): it proves nothing either way.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &run{cfg: cfg, epoch: time.Now().Round(0), seed: cfg.Seed, live: map[int]*proc{}, nextID: 1}
	if s.seed == 0 {
		s.seed = mrand.Uint64()
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	s.prefix = "corral-soak-" + hex.EncodeToString(tag[:])
	defer s.cleanup()

	if err := s.setUp(ctx); err != nil {
		return nil, err
	}
	start := s.since()
	end := start + cfg.Duration
	bar := termbar.Elapsed(cfg.Progress, "soak", cfg.Duration, func() time.Duration { return s.since() - start })
	s.logf("start: %d workers, seed %d, Redis %s, origin %s", cfg.Processes, s.seed, s.redisLabel(), s.origin.URL())

	var chaos sync.WaitGroup
	chaosCtx, stopChaos := context.WithCancel(ctx)
	defer stopChaos()
	s.mu.Lock()
	s.abort = stopChaos
	s.mu.Unlock()
	for kind, f := range []func(context.Context, *mrand.Rand, time.Duration){s.killer, s.deleter, s.restarter} {
		chaos.Add(1)
		go func() {
			defer chaos.Done()
			f(chaosCtx, mrand.New(mrand.NewPCG(s.seed, uint64(kind))), end)
		}()
	}
	chaos.Wait()
	bar.Stop()
	elapsed := s.since() - start

	stopFailures := s.stopAll()
	s.watchers.Wait()
	if err := s.fatalErr(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("soak: interrupted: %w", err)
	}
	s.logf("stopped: checking")
	return s.report(elapsed, stopFailures), nil
}

// setUp starts Redis (unless given), the origin, the orchestrator's cache
// and the workers, and waits until every worker is ready.
func (s *run) setUp(ctx context.Context) error {
	if s.cfg.RedisURL == "" {
		if _, err := redisproc.Binary(); err != nil {
			return errNoRedisServer
		}
		var err error
		if s.dir, err = os.MkdirTemp("", "corral-soak-"); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		if s.redis, err = redisproc.Start(ctx, s.dir); err != nil {
			return fmt.Errorf("soak: start redis-server: %w", err)
		}
		s.redisURL = s.redis.URL()
	} else {
		s.redisURL = s.cfg.RedisURL
	}
	opts, err := redis.ParseURL(s.redisURL)
	if err != nil {
		return fmt.Errorf("soak: --redis: %w", err)
	}
	opts.ReadTimeout, opts.WriteTimeout = deleteTimeout, deleteTimeout
	s.rdb = redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = s.rdb.Ping(pctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("soak: cannot reach Redis at %s: %w", s.redisLabel(), err)
	}
	o := workerOptions(s.prefix, s.cfg.TTL)
	o.Logger = slog.New(slog.DiscardHandler)
	if s.cache, err = corral.New(s.rdb, o); err != nil {
		return err
	}
	if s.origin, err = startOrigin(s.epoch, s.cfg.Keys, s.cfg.OriginLatency); err != nil {
		return err
	}

	var started []*proc
	for range s.cfg.Processes {
		p, err := s.spawn()
		if err != nil {
			return err
		}
		started = append(started, p)
	}
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	for _, p := range started {
		select {
		case <-p.ready:
		case <-p.exited:
			return fmt.Errorf("soak: worker %d exited at start: %v%s", p.id, p.waitErr, p.tail.suffix())
		case <-timer.C:
			return fmt.Errorf("soak: worker %d not ready within %v%s", p.id, readyTimeout, p.tail.suffix())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// spawn starts the next worker and watches it.
func (s *run) spawn() (*proc, error) {
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.mu.Unlock()
	p, err := s.startProc(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.live[id] = p
	s.all = append(s.all, p)
	s.mu.Unlock()
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		<-p.exited
		if msg := p.unexpectedExit(); msg != "" {
			s.mu.Lock()
			delete(s.live, p.id)
			s.failures = append(s.failures, Failure{Worker: p.id, At: s.since(), Msg: msg})
			s.mu.Unlock()
			s.logf("worker %d %s", p.id, msg)
		}
	}()
	return p, nil
}

func (s *run) workerConfig(id int) workerConfig {
	return workerConfig{
		ID: id, RedisURL: s.redisURL, Origin: s.origin.URL(), Prefix: s.prefix,
		Keys: s.cfg.Keys, Goroutines: s.cfg.Goroutines, Think: s.cfg.Think, TTL: s.cfg.TTL,
		Strategy: s.cfg.Strategy, Epoch: s.epoch.UnixNano(), Seed: s.seed,
	}
}

// since is the wall-clock time since the epoch.
func (s *run) since() time.Duration { return time.Since(s.epoch) }

// pause waits about every (uniform in [0.5, 1.5] x every) and reports
// whether the chaos goes on: false at end (of the soak's duration) or when
// ctx ends. When every is 0 (this chaos is off) it waits for the end.
func (s *run) pause(ctx context.Context, rng *mrand.Rand, every, end time.Duration) bool {
	left := end - s.since()
	d := left
	if every > 0 {
		d = min(time.Duration(float64(every)*(0.5+rng.Float64())), left)
	}
	d = max(d, 0)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return s.since() < end && s.fatalErr() == nil
}

// killer kills a random worker with SIGKILL about every KillEvery and
// starts a replacement at once.
func (s *run) killer(ctx context.Context, rng *mrand.Rand, end time.Duration) {
	for s.pause(ctx, rng, s.cfg.KillEvery, end) {
		s.mu.Lock()
		ids := make([]int, 0, len(s.live))
		for id := range s.live {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var p *proc
		if len(ids) > 0 {
			p = s.live[ids[rng.IntN(len(ids))]]
			delete(s.live, p.id)
			s.kills = append(s.kills, Kill{Worker: p.id, At: s.since()})
		}
		s.mu.Unlock()
		if p == nil {
			continue
		}
		pid := p.cmd.Process.Pid
		p.kill()
		np, err := s.spawn()
		if err != nil {
			s.setFatal(err)
			return
		}
		s.logf("killed worker %d (pid %d); started worker %d (pid %d)", p.id, pid, np.id, np.cmd.Process.Pid)
	}
}

// deleter bumps a random key's version at the origin about every
// DeleteEvery and then deletes the key through the orchestrator's Cache,
// recording when Delete was called and when it returned.
func (s *run) deleter(ctx context.Context, rng *mrand.Rand, end time.Duration) {
	for s.pause(ctx, rng, s.cfg.DeleteEvery, end) {
		key := rng.IntN(s.cfg.Keys)
		v := s.origin.bump(key)
		dctx, cancel := context.WithTimeout(context.Background(), deleteTimeout)
		start := s.since()
		err := s.cache.Delete(dctx, "k"+strconv.Itoa(key))
		d := Delete{Key: key, Version: v, Start: start, End: s.since()}
		cancel()
		if err != nil {
			d.Err = err.Error()
		}
		s.mu.Lock()
		s.deletes = append(s.deletes, d)
		s.mu.Unlock()
		s.logf("deleted k%d (version now %d) in %v%s", key, v, (d.End - d.Start).Round(time.Microsecond), errSuffix(err))
	}
}

// restarter kills the soak's own Redis about every RestartEvery, keeps it
// down RedisDowntime, and starts it again, empty, on the same port. A Redis
// given by URL is never restarted.
func (s *run) restarter(ctx context.Context, rng *mrand.Rand, end time.Duration) {
	every := s.cfg.RestartEvery
	if s.redis == nil {
		every = 0
	}
	for s.pause(ctx, rng, every, end) {
		down := s.since()
		s.redis.Kill()
		t := time.NewTimer(s.cfg.RedisDowntime)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		err := s.redis.Restart(context.WithoutCancel(ctx))
		up := s.since()
		if err != nil {
			s.setFatal(fmt.Errorf("soak: restart redis-server: %w", err))
			return
		}
		s.mu.Lock()
		s.outages = append(s.outages, Outage{Down: down, Up: up})
		s.mu.Unlock()
		s.logf("restarted Redis: down %v", (up - down).Round(time.Millisecond))
	}
}

// stopAll tells every live worker to stop and waits for them, and returns
// the failures of those that did not stop well.
func (s *run) stopAll() []Failure {
	s.mu.Lock()
	s.stopped = s.since()
	live := make([]*proc, 0, len(s.live))
	for _, p := range s.live {
		live = append(live, p)
	}
	s.live = map[int]*proc{}
	s.mu.Unlock()
	var mu sync.Mutex
	var failures []Failure
	var wg sync.WaitGroup
	for _, p := range live {
		wg.Go(func() {
			if msg := p.stop(stopTimeout); msg != "" {
				mu.Lock()
				failures = append(failures, Failure{Worker: p.id, At: s.since(), Msg: msg})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failures
}

func (s *run) setFatal(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal == nil {
		s.fatal = err
	}
	if s.abort != nil {
		s.abort()
	}
}

func (s *run) fatalErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// cleanup stops whatever is still running, after a failure too.
func (s *run) cleanup() {
	s.mu.Lock()
	procs := slices.Clone(s.all)
	s.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			p.kill()
		}
	}
	s.watchers.Wait()
	if s.origin != nil {
		s.origin.close()
	}
	if s.cache != nil {
		_ = s.cache.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.redis != nil {
		s.redis.Stop()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

func (s *run) logf(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	fmt.Fprintf(s.cfg.Log, "soak t=%s "+format+"\n", append([]any{fmtT(s.since())}, args...)...)
}

// redisLabel names the Redis in reports, without a password.
func (s *run) redisLabel() string {
	if s.redis != nil {
		return "private redis-server on " + s.redis.Addr
	}
	u, err := url.Parse(s.redisURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}
