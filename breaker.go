package corral

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// breaker is the circuit breaker in front of one Redis node (a single server,
// or one Cluster master: a master failing over does not cut the others off)
// (github.com/sony/gobreaker). After BreakerThreshold consecutive failed
// calls it opens: for BreakerCooldown every call fails at once with
// ErrCircuitOpen, so Fetch fails open without paying RedisTimeout on each
// call. Then it lets one call through (half-open): a success closes it, a
// failure opens it again.
type breaker struct {
	cb         *gobreaker.TwoStepCircuitBreaker[any]
	cause      func() error               // what went wrong with Redis lately, for errors and the warning
	lastFailed atomic.Pointer[failedCall] // the latest call that failed, when cause knows nothing
}

// failedCall is an error that a call through the breaker failed with.
type failedCall struct{ err error }

func newBreaker(o Options, stats *counters, node string, cause func() error) *breaker {
	if o.DisableBreaker {
		return nil
	}
	b := &breaker{cause: cause}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[any](gobreaker.Settings{
		Name:        "corral " + node,
		MaxRequests: 1,
		Timeout:     o.BreakerCooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(o.BreakerThreshold)
		},
		IsSuccessful: func(err error) bool { return !redisFailed(err) },
		IsExcluded: func(err error) bool {
			var gone callerGone
			return errors.As(err, &gone) || dialTimedOut(err) // sent again (pipeline.go)
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			observeBreaker(o, node, to)
			switch to {
			case gobreaker.StateOpen:
				stats.breakerOpens.Add(1)
				o.Logger.Warn("corral: Redis keeps failing; circuit breaker open", "node", node, "cooldown", o.BreakerCooldown, "err", b.why())
			case gobreaker.StateClosed:
				o.Logger.Info("corral: Redis answers again; circuit breaker closed", "node", node)
			}
		},
	})
	return b
}

// allow lets one exchange with Redis through unless the breaker is open;
// done reports its outcome.
func (b *breaker) allow() (done func(error), err error) {
	if b == nil {
		return func(error) {}, nil
	}
	done, err = b.cb.Allow()
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		if cause := b.cause(); cause != nil {
			return nil, fmt.Errorf("%w (%v; %w)", ErrCircuitOpen, err, cause)
		}
		return nil, fmt.Errorf("%w (%v)", ErrCircuitOpen, err)
	}
	return done, err
}

// failed remembers err, when it says Redis failed, as the latest failure of
// a call through b: the warning names it when nothing else is known (a
// silent Redis). Called before the call's done.
func (b *breaker) failed(err error) {
	if b != nil && redisFailed(err) {
		b.lastFailed.Store(&failedCall{err})
	}
}

// why is what went wrong with Redis lately: the latest error of a Redis
// call (a refused connection says more than the silence that followed), or
// else the error of the latest call that failed (a silent Redis).
func (b *breaker) why() error {
	if cause := b.cause(); cause != nil {
		return cause
	}
	if f := b.lastFailed.Load(); f != nil {
		return f.err
	}
	return nil
}

// open reports whether the breaker is open or half-open now.
func (b *breaker) open() bool {
	return b != nil && b.cb.State() != gobreaker.StateClosed
}

// callerGone wraps the error of a call abandoned because its caller's
// context ended: not a failure of Redis.
type callerGone struct{ err error }

func (e callerGone) Error() string { return e.err.Error() }
func (e callerGone) Unwrap() error { return e.err }

// redisFailed reports whether err says Redis is unavailable: a network
// error, a timeout, or a reply that means "not now" (loading, cluster down,
// failing over, busy). Other error replies mean Redis is up and answering:
// among them a refused write (OOM, READONLY), with which Redis still serves
// reads; the caller leaving is nobody's failure.
func redisFailed(err error) bool {
	if err == nil {
		return false
	}
	var gone callerGone
	if errors.As(err, &gone) || errors.Is(err, errBadEntry) {
		return false // the caller left, or Redis answered with an entry that does not decode
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	msg := reply.Error()
	for _, p := range []string{"LOADING", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
