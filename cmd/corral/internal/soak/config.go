package soak

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/corralhq/corral"
)

// Defaults of Config, documented in `corral soak --help`.
const (
	DefaultDuration      = 20 * time.Second
	DefaultProcesses     = 4
	DefaultGoroutines    = 20
	DefaultKeys          = 10
	DefaultOriginLatency = 20 * time.Millisecond
	DefaultThink         = 2 * time.Millisecond
	DefaultTTL           = 500 * time.Millisecond
	DefaultKillEvery     = 2 * time.Second
	DefaultDeleteEvery   = time.Second
	DefaultRestartEvery  = 5 * time.Second
	DefaultRedisDowntime = 500 * time.Millisecond
)

// The workers' corral.Options and the bounds the checks use. They are fixed,
// so that the invariants' arithmetic below holds; each is explained where the
// invariants use it (check.go).
const (
	// Deadline bounds every Fetch a worker makes (its context deadline).
	Deadline = 2 * time.Second
	// DeadlineSlack is how far past Deadline a Fetch may return (invariant 3).
	DeadlineSlack = 100 * time.Millisecond

	// RedisTimeout is corral.Options.RedisTimeout: short, so a Redis that
	// is down costs a caller little before it fails open.
	RedisTimeout = 200 * time.Millisecond
	// LeaseTTL is corral.Options.LeaseTTL: a killed lease holder's lease is
	// taken over within about 1s.
	LeaseTTL = time.Second
	// BreakerCooldown is corral.Options.BreakerCooldown: a breaker that
	// failures alone opened (no trip: see RecoveryGrace) lets a call
	// through again within half a second.
	BreakerCooldown = 500 * time.Millisecond
	// FailOpenPerRestart is invariant 5's bound: the fail-open loads of a
	// key one worker may make in one Redis restart that kept Redis down
	// about RedisDowntime; one more for each value's hold (heldFor) it kept
	// Redis down longer (see checkOutages).
	FailOpenPerRestart = 2
	// RecoveryGrace (650ms) is how long after Redis answers again (a
	// restart's Up) a worker may still be unable to use it, its breaker
	// tripped until its recovery probe sees Redis (corral's
	// internal/transport/down.go): the probe that follows Up starts within recoverPause (150ms); its PING
	// on a connection of its own and its PING through the client are each
	// bounded by RedisTimeout (2 x 200ms), which they take only on a busy
	// machine (on loopback they take a millisecond); and busySlack (100ms)
	// for the worker's goroutines to run on a busy 2-core machine shared by
	// the workers, the orchestrator and Redis. Invariant 5 counts the
	// fail-open loads that begin up to RecoveryGrace after Up, and
	// invariant 2 forgives a stale value answered from memory up to then
	// (see checkOutages, checkStale). The breaker that BreakerThreshold
	// failures in a row open is closed by the trip's end too (corral's
	// internal/transport/breaker.go: the failures were the same outage's); opened without a
	// trip (a stall made Redis look silent), it stays open for
	// BreakerCooldown ±25%, whatever Redis does.
	RecoveryGrace = recoverPause + 2*RedisTimeout + busySlack
	// Jitter is corral.Options.Jitter (the library's default, set
	// explicitly because invariant 1 depends on it): each soft TTL is the
	// TTL x [1-Jitter, 1+Jitter).
	Jitter = 0.1

	// recoverPause is the longest pause between the recovery probes of a
	// node found down (corral's internal/transport/down.go: recoverMax,
	// 100ms, spread by +50%): a worker's probe asks Redis again within it
	// of its answering.
	recoverPause = 150 * time.Millisecond

	// busySlack is what the checks allow a busy 2-core machine for a
	// goroutine to run after it could (the 100ms in corral's stall bound,
	// 2 x RedisTimeout + 100ms, is that slack too).
	busySlack = 100 * time.Millisecond

	// degradedHold is how long after a worker last saw a sign of Redis
	// trouble (a failed Redis call, an open breaker, a lost lease, a
	// rejected commit) it counts as degraded: its loads are Troubled, and
	// its reported Interval lasts that long.
	degradedHold = time.Second
	// deleteTimeout bounds the orchestrator's Delete calls.
	deleteTimeout = time.Second
	// readyTimeout bounds how long a worker process may take to start.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long a worker may take to stop once told to.
	stopTimeout = 20 * time.Second
)

// Strategies a worker can read through. Only corral is a real soak; naive
// (plain cache-aside: GET, on a miss load and SET) exists to show that the
// checks catch a cache that stampedes.
const (
	StrategyCorral = "corral"
	StrategyNaive  = "naive"
)

// Config is one soak run. Start from DefaultConfig.
type Config struct {
	Duration   time.Duration // how long the workers are hammered, chaos included
	Processes  int           // worker processes running at any time
	Goroutines int           // concurrent callers per worker
	Keys       int           // keys every caller picks from at random

	// RedisURL is the Redis to use. Empty: the soak starts a private
	// redis-server (which must be on PATH) on a free loopback port, restarts
	// it every RestartEvery, and stops it at the end. A Redis given by URL
	// is never restarted.
	RedisURL string

	OriginLatency time.Duration // added to every origin load
	Think         time.Duration // each caller's pause between its Fetch calls
	TTL           time.Duration // the soft TTL of cached values; the stale window is as long

	KillEvery     time.Duration // about how often a worker is killed (SIGKILL) and replaced
	DeleteEvery   time.Duration // about how often a key's version is bumped and the key deleted
	RestartEvery  time.Duration // about how often the soak's own Redis is restarted
	RedisDowntime time.Duration // how long Redis stays down at each restart

	// Seed seeds the chaos schedule (which worker, which key, and the
	// intervals, each uniform in [0.5, 1.5] x its average). 0: a random seed,
	// reported.
	Seed uint64

	// Strategy is StrategyCorral, or StrategyNaive to show what a
	// stampeding cache does to the checks.
	Strategy string

	// WorkerCommand returns the command that runs one worker: a process
	// that calls RunWorker with the configuration the soak puts in its
	// environment (WorkerEnv). Required.
	WorkerCommand func() *exec.Cmd

	// Progress, when not nil, receives a progress bar (meant for stderr).
	Progress io.Writer
	// Log, when not nil, receives a line per chaos event as it happens.
	Log io.Writer
	// WorkerStderr, when not nil, receives the workers' stderr; otherwise
	// only the tail of a worker that failed is reported.
	WorkerStderr io.Writer
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Duration:      DefaultDuration,
		Processes:     DefaultProcesses,
		Goroutines:    DefaultGoroutines,
		Keys:          DefaultKeys,
		OriginLatency: DefaultOriginLatency,
		Think:         DefaultThink,
		TTL:           DefaultTTL,
		KillEvery:     DefaultKillEvery,
		DeleteEvery:   DefaultDeleteEvery,
		RestartEvery:  DefaultRestartEvery,
		RedisDowntime: DefaultRedisDowntime,
		Strategy:      StrategyCorral,
	}
}

func (c Config) validate() error {
	switch {
	case c.Duration <= 0:
		return errors.New("soak: duration must be positive")
	case c.Processes < 1:
		return errors.New("soak: at least 1 process is needed")
	case c.Goroutines < 1:
		return errors.New("soak: at least 1 goroutine per process is needed")
	case c.Keys < 1:
		return errors.New("soak: at least 1 key is needed")
	case c.OriginLatency < 0, c.Think < 0, c.RedisDowntime < 0:
		return errors.New("soak: origin latency, think time and Redis downtime must not be negative")
	case c.TTL < 50*time.Millisecond:
		return fmt.Errorf("soak: the TTL (%v) must be at least 50ms", c.TTL)
	case c.KillEvery < 0, c.DeleteEvery < 0, c.RestartEvery < 0:
		return errors.New("soak: chaos intervals must not be negative (0 turns one off)")
	case c.Strategy != StrategyCorral && c.Strategy != StrategyNaive:
		return fmt.Errorf("soak: unknown strategy %q (known: %s, %s)", c.Strategy, StrategyCorral, StrategyNaive)
	case c.WorkerCommand == nil:
		return errors.New("soak: no WorkerCommand")
	}
	return nil
}

// workerOptions are the corral.Options of every worker (and of the
// orchestrator's own Cache, which only deletes).
func workerOptions(prefix string, ttl time.Duration) *corral.Options {
	return &corral.Options{
		Prefix:          prefix,
		RedisTimeout:    RedisTimeout,
		LeaseTTL:        LeaseTTL,
		StaleTTL:        ttl, // stale-while-revalidate: one refresh per TTL, at the soft expiry, no early refresh
		Jitter:          Jitter,
		BreakerCooldown: BreakerCooldown,
	}
}

// heldFor is how long a worker serves a fail-open load's value from memory
// while it cannot use Redis, before it loads the key again:
// corral.FailSafeOptions.Throttle (the workers leave it at its default),
// never past the value's soft TTL, which is ttl (no Jitter there).
func heldFor(ttl time.Duration) time.Duration { return min(corral.DefaultFailSafeThrottle, ttl) }

// window is the length of the windows of invariant 1: the shortest soft TTL
// a committed value can get (TTL x (1 - Jitter)), less 5ms for the rounding
// of times to milliseconds in Redis.
func window(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*(1-Jitter)) - 5*time.Millisecond
}
