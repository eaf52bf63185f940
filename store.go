package corral

import (
	"github.com/corralhq/corral/internal/wire"

	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds every Redis command corral sends outside pub/sub
// subscriptions (notify.go). The protocol itself is in the .lua files.

var (
	//go:embed scripts/fetch.lua
	fetchSrc string
	//go:embed scripts/commit.lua
	commitSrc string
	//go:embed scripts/renew.lua
	renewSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/delete.lua
	deleteSrc string

	fetchScript   = redis.NewScript(fetchSrc)
	commitScript  = redis.NewScript(commitSrc)
	renewScript   = redis.NewScript(renewSrc)
	releaseScript = redis.NewScript(releaseSrc)
	deleteScript  = redis.NewScript(deleteSrc)
)

// scripter is the part of the Redis client the scripts need.
type scripter interface {
	redis.Scripter
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
	SPublish(ctx context.Context, channel string, message any) *redis.IntCmd
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
}

// store runs corral's Redis commands, each bounded by RedisTimeout.
type store struct {
	rdb     scripter
	timeout time.Duration
	inline  int
	noShard bool     // Options.DisableShardedPubSub
	breaker *breaker // nil when disabled
	reload  func()   // on a Cluster: re-learn which node serves which slot

	calls sync.WaitGroup // commands still running after their caller gave up

	probeMu sync.Mutex             // one probe at a time
	publish atomic.Pointer[string] // "SPUBLISH" or "PUBLISH"; nil until detected
}

// do runs one Redis call through the circuit breaker and waits for it at
// most RedisTimeout. go-redis bounds a socket read by the context only when
// the client has ContextTimeoutEnabled, and by ReadTimeout (3s by default)
// otherwise; to keep the bound with any client, the call runs in its own
// goroutine, and a caller that times out returns without it. The goroutine
// ends when go-redis gives up; Close waits for it.
func (s *store) do(ctx context.Context, call func(context.Context) (any, error)) (any, error) {
	v, err := s.breaker.run(func() (any, error) {
		parent := ctx
		ctx, cancel := context.WithTimeout(ctx, s.timeout)
		defer cancel()
		type result struct {
			v   any
			err error
		}
		done := make(chan result, 1)
		s.calls.Add(1)
		go func() {
			defer s.calls.Done()
			v, err := call(ctx)
			done <- result{v, err}
		}()
		select {
		case r := <-done:
			if r.err != nil && parent.Err() != nil {
				return nil, callerGone{r.err}
			}
			return r.v, r.err
		case <-ctx.Done():
			if err := parent.Err(); err != nil {
				return nil, callerGone{err}
			}
			return nil, fmt.Errorf("%w (%v)", ErrRedisTimeout, s.timeout)
		}
	})
	if s.reload != nil && redisFailed(err) && !errors.Is(err, ErrCircuitOpen) {
		// A node may have failed over. go-redis learns new slot owners from
		// MOVED replies, which a dead node never sends: ask it to reload.
		s.reload()
	}
	return v, err
}

// call runs a script. While a Cluster migrates the slot of its keys, a
// script whose keys are split between the two nodes gets TRYAGAIN; it is
// tried again after a short, growing pause, within RedisTimeout.
func (s *store) call(ctx context.Context, sc *redis.Script, keys []string, args ...any) (any, error) {
	return s.do(ctx, func(ctx context.Context) (any, error) {
		pause := 5 * time.Millisecond
		for {
			v, err := sc.Run(ctx, s.rdb, keys, args...).Result()
			if err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
				return v, err
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return v, err
			}
			pause *= 2
		}
	})
}

func (s *store) fetch(ctx context.Context, n wire.Names, token string, leaseTTL time.Duration, x float64) (wire.FetchReply, error) {
	res, err := s.call(ctx, fetchScript, []string{n.Entry, n.Lease},
		token, leaseTTL.Milliseconds(), strconv.FormatFloat(x, 'g', -1, 64))
	if err != nil {
		return wire.FetchReply{}, fmt.Errorf("corral: fetch: %w", err)
	}
	r, err := wire.ParseFetch(res)
	if err != nil {
		return wire.FetchReply{}, fmt.Errorf("corral: fetch: %w", err)
	}
	return r, nil
}

// entryWrite is one entry to store: a load's result or a Set.
type entryWrite struct {
	value []byte
	kind  wire.Kind
	soft  time.Duration // soft TTL
	hard  time.Duration // hard TTL: soft + stale window
	took  time.Duration // the load's duration, for XFetch
}

// commit stores w under n. With a token it stores only while that token holds
// the lease; it reports whether it stored.
func (s *store) commit(ctx context.Context, n wire.Names, token string, w entryWrite) (bool, error) {
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	res, err := s.call(ctx, commitScript, []string{n.Entry, n.Lease, n.Notice},
		token, w.value, w.kind.Flags(), ms(w.soft), ms(w.hard), fractionalMS(w.took), pub, s.inline)
	if err != nil {
		return false, fmt.Errorf("corral: commit: %w", err)
	}
	return res == int64(1), nil
}

// renewResult is what renew.lua replied.
type renewResult int

const (
	renewed   renewResult = 1
	renewNot  renewResult = 0  // the token no longer holds the lease
	renewLate renewResult = -1 // reached the server after its deadline
)

func (s *store) renew(ctx context.Context, n wire.Names, token string, ttl time.Duration, deadline int64) (renewResult, error) {
	res, err := s.call(ctx, renewScript, []string{n.Lease}, token, ttl.Milliseconds(), deadline)
	if err != nil {
		return renewNot, fmt.Errorf("corral: renew lease: %w", err)
	}
	v, _ := res.(int64)
	return renewResult(v), nil
}

// releaseArgs say how release.lua hands a lease back.
type releaseArgs struct {
	notice string        // published when not empty
	hold   time.Duration // > 0: keep refreshes off this long (a backoff marker replaces the lease)
	mark   bool          // flag the entry: its last refresh failed
}

// release hands the lease back if token still holds it (release.lua).
func (s *store) release(ctx context.Context, n wire.Names, token string, a releaseArgs) (bool, error) {
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return false, err
	}
	mark := 0
	if a.mark {
		mark = 1
	}
	hold := int64(0)
	if a.hold > 0 {
		hold = ms(a.hold)
	}
	res, err := s.call(ctx, releaseScript, []string{n.Lease, n.Notice, n.Entry}, token, pub, a.notice, hold, mark)
	if err != nil {
		return false, fmt.Errorf("corral: release lease: %w", err)
	}
	return res == int64(1), nil
}

func (s *store) delete(ctx context.Context, n wire.Names) error {
	pub, err := s.publishCommand(ctx)
	if err != nil {
		return err
	}
	if _, err := s.call(ctx, deleteScript, []string{n.Entry, n.Lease, n.Notice}, pub); err != nil {
		return fmt.Errorf("corral: delete: %w", err)
	}
	return nil
}

// get reads an entry without taking a lease: its value and what it caches.
// ok is false when there is no entry.
func (s *store) get(ctx context.Context, n wire.Names) (value []byte, kind wire.Kind, ok bool, err error) {
	res, err := s.do(ctx, func(ctx context.Context) (any, error) {
		return s.rdb.HMGet(ctx, n.Entry, "v", "f").Result()
	})
	if err != nil {
		return nil, wire.Value, false, fmt.Errorf("corral: get: %w", err)
	}
	vals := res.([]any)
	v, ok := vals[0].(string)
	if !ok {
		return nil, wire.Value, false, nil
	}
	f, _ := vals[1].(string)
	kind, _ = wire.ParseFlags(f)
	return []byte(v), kind, true, nil
}

// publishCommand returns the command the scripts publish notices with:
// SPUBLISH where the server has sharded pub/sub (Redis 7+) and it is not
// disabled, PUBLISH otherwise. It probes the server on first use, so New
// works while Redis is down; concurrent first callers share one probe. A
// server that answers the probe with any error (an unknown or renamed
// command, an ACL that denies it) gets PUBLISH; a probe that gets no answer
// is tried again next time.
func (s *store) publishCommand(ctx context.Context) (string, error) {
	if pub := s.publish.Load(); pub != nil {
		return *pub, nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if pub := s.publish.Load(); pub != nil {
		return *pub, nil
	}
	pub := "PUBLISH"
	if !s.noShard {
		// A channel nobody subscribes to; the probe reaches no one.
		_, err := s.do(ctx, func(ctx context.Context) (any, error) {
			return s.rdb.SPublish(ctx, "corral:probe", "").Result()
		})
		var reply redis.Error
		switch {
		case err == nil:
			pub = "SPUBLISH"
		case !errors.As(err, &reply):
			return "", fmt.Errorf("corral: detect sharded pub/sub: %w", err)
		}
	}
	s.publish.Store(&pub)
	return pub, nil
}

func (s *store) sharded(ctx context.Context) (bool, error) {
	pub, err := s.publishCommand(ctx)
	return pub == "SPUBLISH", err
}

// fractionalMS formats d in milliseconds with microsecond precision, so
// that XFetch sees loads shorter than a millisecond too.
func fractionalMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', -1, 64)
}

// ms rounds d up to whole milliseconds, at least 1: Redis rejects a 0 TTL.
func ms(d time.Duration) int64 {
	m := (d + time.Millisecond - 1) / time.Millisecond
	return max(int64(m), 1)
}
