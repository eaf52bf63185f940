package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// WorkerEnv is the environment variable that carries a worker's
// configuration (JSON) from the orchestrator to the worker process.
const WorkerEnv = "CORRAL_SOAK_WORKER"

// workerConfig is what a worker process is told.
type workerConfig struct {
	ID         int           `json:"id"`
	RedisURL   string        `json:"redis"`
	Origin     string        `json:"origin"`
	Prefix     string        `json:"prefix"`
	Keys       int           `json:"keys"`
	Goroutines int           `json:"goroutines"`
	Think      time.Duration `json:"think"`
	TTL        time.Duration `json:"ttl"`
	Strategy   string        `json:"strategy"`
	Epoch      int64         `json:"epoch"` // the run's epoch, Unix ns
	Seed       uint64        `json:"seed"`
}

// message is one line a worker writes on stdout: what happened since the
// last line. Times are ns since the epoch.
//
// The lines are not versioned: the orchestrator and its workers are one
// binary. A field added later must leave older lines readable, as the
// outcome did: a call written as 4 numbers decodes with outcome 0
// (unknown), since encoding/json zeroes the rest of an array.
type message struct {
	Ready    bool          `json:"ready,omitempty"`
	Calls    [][5]int64    `json:"c,omitempty"` // key, start, end, version, outcome (corral.EventKind)
	Errors   []callError   `json:"e,omitempty"`
	Degraded [][2]int64    `json:"d,omitempty"` // from, to
	Breaker  [][2]int64    `json:"b,omitempty"` // at, state (corral.EventBreakerOpen, HalfOpen or Closed)
	Stats    *corral.Stats `json:"s,omitempty"`
	Done     bool          `json:"done,omitempty"`
}

type callError struct {
	Key   int    `json:"k"`
	Start int64  `json:"s"`
	End   int64  `json:"t"`
	Err   string `json:"err"`
}

// Reporting cadence: calls and degraded spans are written every
// flushEvery (a killed worker loses at most that much), its Stats every
// statsEvery; the observer samples the cache's counters every sampleEvery.
const (
	sampleEvery = 10 * time.Millisecond
	flushEvery  = 30 * time.Millisecond
	statsEvery  = 300 * time.Millisecond
)

// RunWorker runs one worker process: it reads its configuration from env
// (the value of WorkerEnv), hammers the key set through its own Redis client
// and cache until stdin reaches EOF (the orchestrator closes it, or dies) or
// ctx ends, and reports on stdout as JSON lines. It returns once its calls
// have ended, everything is reported and its cache is closed.
func RunWorker(ctx context.Context, env string, stdin io.Reader, stdout io.Writer) error {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(env), &cfg); err != nil {
		return fmt.Errorf("soak worker: bad %s: %w", WorkerEnv, err)
	}
	// go-redis logs every failed dial; Redis restarts are expected here.
	// (A global setting: RunWorker owns its process.)
	redis.SetLogger(quietLogger{})
	w, err := newWorker(cfg, stdout)
	if err != nil {
		return err
	}
	defer w.close()

	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		halt()
	}()
	stopOnCtx := context.AfterFunc(ctx, halt)
	defer stopOnCtx()
	if err := w.rep.write(&message{Ready: true}); err != nil {
		return err
	}

	var callers sync.WaitGroup
	for g := range cfg.Goroutines {
		callers.Add(1)
		go func() {
			defer callers.Done()
			w.hammer(g, stop)
		}()
	}
	reporterDone := make(chan struct{})
	go func() {
		defer close(reporterDone)
		w.report(stop, halt)
	}()
	callers.Wait()
	halt()
	<-reporterDone
	return w.rep.final(w.strat.stats())
}

// worker is one worker process's state.
type worker struct {
	cfg   workerConfig
	epoch time.Time
	http  *http.Client
	strat strategy
	obs   *observer
	rep   *reporter
}

func newWorker(cfg workerConfig, stdout io.Writer) (*worker, error) {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("soak worker: %w", err)
	}
	w := &worker{
		cfg:   cfg,
		epoch: time.Unix(0, cfg.Epoch),
		http: &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: cfg.Goroutines + 8,
		}},
		rep: &reporter{out: stdout},
	}
	switch cfg.Strategy {
	case StrategyCorral:
		w.strat, err = newCorralStrategy(redis.NewClient(opts), cfg, cacheObserver{since: w.since, rep: w.rep})
	case StrategyNaive:
		w.strat = newNaiveStrategy(opts, cfg)
	default:
		err = fmt.Errorf("soak worker: unknown strategy %q", cfg.Strategy)
	}
	if err != nil {
		return nil, err
	}
	w.obs = &observer{read: w.strat.signals, emit: w.rep.degraded, prev: w.since()}
	return w, nil
}

func (w *worker) close() {
	w.strat.close()
	w.http.CloseIdleConnections()
}

// since is the wall-clock time since the run's epoch: the same clock as the
// orchestrator's and Redis's.
func (w *worker) since() time.Duration { return time.Since(w.epoch) }

// hammer is one caller: Fetch a random key with a Deadline, record it
// with its outcome, pause Think, until stop.
func (w *worker) hammer(g int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.ID)<<16|uint64(g)))
	st := new(callState) // this caller's, cleared before each call
	base := context.WithValue(context.Background(), callStateKey{}, st)
	var pause *time.Timer
	if w.cfg.Think > 0 {
		pause = time.NewTimer(w.cfg.Think)
		defer pause.Stop()
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		w.call(base, st, rng.IntN(w.cfg.Keys))
		if pause == nil {
			continue
		}
		pause.Reset(w.cfg.Think)
		select {
		case <-stop:
			return
		case <-pause.C:
		}
	}
}

// call makes one Fetch of key with a Deadline, under base, which holds st,
// and records it with its outcome.
func (w *worker) call(base context.Context, st *callState, key int) {
	st.outcome = 0
	ctx, cancel := context.WithTimeout(base, Deadline)
	start := w.since()
	val, err := w.strat.fetch(ctx, key, w.loader(key))
	end := w.since()
	cancel()
	var v int64
	if err == nil {
		v, err = parseValue(key, val)
	}
	w.rep.call(key, start, end, v, st.outcome, err)
}

// loader returns the loader of key: a GET of the origin, which records the
// load with this worker's id, the loader's start time, whether corral
// called it failing open (corral.IsFailOpen), and whether the worker had
// seen Redis trouble lately (the observer).
func (w *worker) loader(key int) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		start := w.since()
		url := w.cfg.Origin + "/k/" + strconv.Itoa(key) + "?w=" + strconv.Itoa(w.cfg.ID) +
			"&t=" + strconv.FormatInt(int64(start), 10) +
			"&fo=" + flag(corral.IsFailOpen(ctx)) + "&tr=" + flag(w.obs.observe(start))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := w.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("origin: %w", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("origin: %s: %s", resp.Status, b)
		}
		return b, err
	}
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// callState is what the worker's Observer learns of one call: its outcome.
// Each caller (hammer) has one, in the context of every call it makes, and
// clears it before each: corral tells a call's outcome on the caller's
// goroutine, with the call's context, before Fetch returns (Observer's
// doc), so the caller reads it after Fetch without a lock.
type callState struct{ outcome corral.EventKind }

type callStateKey struct{}

// cacheObserver is the Observer of a worker's Cache: it writes each call's
// outcome into the call's callState, and reports the breaker's changes.
// Every other event costs it a switch.
type cacheObserver struct {
	since func() time.Duration
	rep   *reporter
}

func (o cacheObserver) Observe(ctx context.Context, e corral.Event) {
	switch {
	case e.Kind.Outcome():
		if st, ok := ctx.Value(callStateKey{}).(*callState); ok {
			st.outcome = e.Kind // one per call
		}
	case e.Kind == corral.EventBreakerOpen, e.Kind == corral.EventBreakerHalfOpen, e.Kind == corral.EventBreakerClosed:
		o.rep.breaker(o.since(), e.Kind)
	}
}

// report samples the observer and writes what the callers recorded, until
// stop. A failed write (the orchestrator is gone) halts the worker.
func (w *worker) report(stop <-chan struct{}, halt func()) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	var lastFlush, lastStats time.Time
	for {
		select {
		case <-stop:
			_ = w.rep.flush(nil)
			return
		case now := <-t.C:
			w.obs.observe(w.since())
			if now.Sub(lastFlush) < flushEvery {
				continue
			}
			lastFlush = now
			var st *corral.Stats
			if now.Sub(lastStats) >= statsEvery {
				lastStats, st = now, w.strat.stats()
			}
			if err := w.rep.flush(st); err != nil {
				halt()
			}
		}
	}
}

// observer tells whether a worker is degraded: in Redis trouble, so that a
// load of its under a lease may fail to commit, or lose its lease (the
// checks' degraded workers; whether a load failed open is corral's to say,
// through corral.IsFailOpen). corral counts every failed Redis call
// (timeouts and calls the breaker skipped included) before it calls a
// loader directly, so a loader that observes the counters sees the failure
// that led to it. The observer marks the worker degraded from the previous
// observation until degradedHold after the one that saw a change (or an
// open breaker), and reports each such span.
type observer struct {
	read func() (uint64, bool)
	emit func(from, to time.Duration)

	mu    sync.Mutex // guards the fields below, so no change is seen twice or missed
	last  uint64
	prev  time.Duration // time of the previous observation
	until time.Duration // degraded until
}

// observe samples the signals at now and reports whether the worker is
// degraded.
func (o *observer) observe(now time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, open := o.read()
	if n != o.last || open {
		o.last = n
		o.until = max(o.until, now+degradedHold)
		o.emit(o.prev, o.until)
	}
	o.prev = now
	return now < o.until
}

// reporter batches what a worker reports into JSON lines.
type reporter struct {
	out io.Writer

	wmu sync.Mutex // serialises writes to out

	mu  sync.Mutex // guards msg
	msg message
}

func (r *reporter) call(key int, start, end time.Duration, v int64, out corral.EventKind, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.msg.Errors = append(r.msg.Errors, callError{Key: key, Start: int64(start), End: int64(end), Err: err.Error()})
		return
	}
	r.msg.Calls = append(r.msg.Calls, [5]int64{int64(key), int64(start), int64(end), v, int64(out)})
}

func (r *reporter) breaker(at time.Duration, state corral.EventKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msg.Breaker = append(r.msg.Breaker, [2]int64{int64(at), int64(state)})
}

func (r *reporter) degraded(from, to time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.msg.Degraded); n > 0 && int64(from) <= r.msg.Degraded[n-1][1] {
		r.msg.Degraded[n-1][1] = max(r.msg.Degraded[n-1][1], int64(to))
		return
	}
	r.msg.Degraded = append(r.msg.Degraded, [2]int64{int64(from), int64(to)})
}

// flush writes what was recorded since the last flush, with st if not nil.
func (r *reporter) flush(st *corral.Stats) error {
	r.mu.Lock()
	m := r.msg
	r.msg = message{}
	r.mu.Unlock()
	if len(m.Calls) == 0 && len(m.Errors) == 0 && len(m.Degraded) == 0 && len(m.Breaker) == 0 && st == nil {
		return nil
	}
	m.Stats = st
	return r.write(&m)
}

// final writes what is left, with st and the end of the calls.
func (r *reporter) final(st *corral.Stats) error {
	r.mu.Lock()
	m := r.msg
	r.msg = message{}
	r.mu.Unlock()
	m.Stats, m.Done = st, true
	return r.write(&m)
}

func (r *reporter) write(m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_, err = r.out.Write(append(b, '\n'))
	return err
}
