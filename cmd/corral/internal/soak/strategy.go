package soak

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// strategy is how a worker reads through its cache.
type strategy interface {
	fetch(ctx context.Context, key int, load func(context.Context) ([]byte, error)) ([]byte, error)
	// signals returns a counter that grows with every sign of Redis
	// trouble, and whether the circuit breaker is open now.
	signals() (uint64, bool)
	stats() *corral.Stats // nil when there are none
	close()
}

// corralStrategy reads through a corral.Cache.
type corralStrategy struct {
	rdb   *redis.Client
	cache *corral.Cache
	ttl   time.Duration
}

func newCorralStrategy(rdb *redis.Client, cfg workerConfig, obs corral.Observer) (*corralStrategy, error) {
	opts := workerOptions(cfg.Prefix, cfg.TTL)
	opts.Logger = slog.New(slog.DiscardHandler) // fail-open warns on every call while Redis is down
	opts.Observer = obs
	c, err := corral.New(rdb, opts)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &corralStrategy{rdb: rdb, cache: c, ttl: cfg.TTL}, nil
}

func (s *corralStrategy) fetch(ctx context.Context, key int, load func(context.Context) ([]byte, error)) ([]byte, error) {
	return s.cache.Fetch(ctx, "k"+strconv.Itoa(key), s.ttl, load)
}

func (s *corralStrategy) signals() (uint64, bool) {
	st := s.cache.Stats()
	return st.RedisErrors + st.LeasesLost + st.CommitsRejected + st.FailOpens, st.BreakerOpen
}

func (s *corralStrategy) stats() *corral.Stats {
	st := s.cache.Stats()
	return &st
}

func (s *corralStrategy) close() {
	_ = s.cache.Close()
	_ = s.rdb.Close()
}

// naiveStrategy is plain cache-aside, for showing what the checks catch:
// GET; on a miss (or a Redis error) load, then SET with the TTL.
type naiveStrategy struct {
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
	errs   atomic.Uint64 // failed Redis calls
}

func newNaiveStrategy(opts *redis.Options, cfg workerConfig) *naiveStrategy {
	opts.ReadTimeout, opts.WriteTimeout = RedisTimeout, RedisTimeout
	s := &naiveStrategy{rdb: redis.NewClient(opts), prefix: cfg.Prefix + ":naive:", ttl: cfg.TTL}
	s.rdb.AddHook(errorCounter{&s.errs})
	return s
}

func (s *naiveStrategy) fetch(ctx context.Context, key int, load func(context.Context) ([]byte, error)) ([]byte, error) {
	name := s.prefix + "k" + strconv.Itoa(key)
	if v, err := s.rdb.Get(ctx, name).Bytes(); err == nil {
		return v, nil
	}
	v, err := load(ctx)
	if err != nil {
		return nil, err
	}
	_ = s.rdb.Set(ctx, name, v, s.ttl).Err()
	return v, nil
}

func (s *naiveStrategy) signals() (uint64, bool) { return s.errs.Load(), false }
func (s *naiveStrategy) stats() *corral.Stats    { return nil }
func (s *naiveStrategy) close()                  { _ = s.rdb.Close() }

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// errorCounter is a go-redis hook counting the commands that failed because
// Redis did (network errors, timeouts). Error replies, a miss included, mean
// Redis is up and answering.
type errorCounter struct{ n *atomic.Uint64 }

func (errorCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h errorCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		var reply redis.Error
		if err != nil && !errors.As(err, &reply) {
			h.n.Add(1)
		}
		return err
	}
}

func (h errorCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
