package transport

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// breaker is the circuit breaker in front of one Redis node (a single server,
// or one Cluster master: a master failing over does not cut the others off).
// It opens in two ways:
//
//   - After Threshold consecutive failed exchanges
//     (github.com/sony/gobreaker): for Cooldown, spread by ±25% per breaker
//     so that a fleet's instances do not try again together, every op
//     fails at once with ErrCircuitOpen, so the Cache answers from memory or
//     fails open without paying the timeout on each call. Then it lets one
//     exchange through (half-open): a success closes it, a failure opens it
//     again.
//   - At once, tripped, on evidence that the node cannot be used at all: its
//     probe connection refused (down.go), a silence past the stall bound, or
//     the client's connections refused at AUTH. It stays open until the
//     node's recovery probe answers (down.go): no caller's call is the one
//     that finds out.
type breaker struct {
	cb         atomic.Pointer[gobreaker.TwoStepCircuitBreaker[any]] // replaced, closed, when a trip ends
	settings   gobreaker.Settings
	cause      func() error               // what went wrong with Redis lately, for errors and the warning
	lastFailed atomic.Pointer[failedCall] // the latest call that failed, when cause knows nothing
	tripped    atomic.Pointer[trip]       // set while tripped (see above)

	node   string
	cfg    BreakerConfig
	log    *slog.Logger
	stats  Stats       // nil for none
	cbOpen atomic.Bool // gobreaker's state is not closed

	mu        sync.Mutex    // guards openSince, wasOpen and frozen, the open-or-closed state as told
	openSince time.Time     // when the breaker last opened, either way; zero while closed
	wasOpen   time.Duration // the time it was open before, in all
	frozen    bool          // the Pipeline closed: the time open stops counting
	warned    atomic.Int64  // when an opening was last warned of (Unix ns)
}

// BreakerConfig is how a Pipeline's circuit breakers open.
type BreakerConfig struct {
	Disable   bool          // no breaker opens, either way
	Threshold int           // failed exchanges in a row that open a node's breaker
	Cooldown  time.Duration // how long it stays open, then, before one exchange goes through
}

// BreakerState is a breaker's state, as Stats is told it.
type BreakerState int

const (
	BreakerClosed BreakerState = iota
	BreakerHalfOpen
	BreakerOpen
)

// trip is a breaker opened by evidence, and why.
type trip struct {
	cause error
	since time.Time
	// recovering is set once the node's probe answered: only the
	// recovery's own ops (Op.Recovery) go through, before any caller's.
	recovering atomic.Bool
	latest     atomic.Pointer[failedCall] // why the latest recovery probe failed
	errv       atomic.Pointer[failedCall] // err's value, made once per cause
}

// failedCall is an error that a call through the breaker failed with.
type failedCall struct{ err error }

// breakerFor makes the circuit breaker of the node at addr (nil when
// disabled).
func (p *Pipeline) breakerFor(addr string) *breaker {
	cfg := p.cfg.Breaker
	if cfg.Disable {
		return nil
	}
	node := addr
	if c, ok := p.rdb.(*redis.Client); ok && node == "" {
		node = c.Options().Addr // off a Cluster: the server's address, for the warnings
	}
	b := &breaker{cause: p.lastError, node: node, cfg: cfg, log: p.cfg.Logger, stats: p.cfg.Stats}
	b.settings = gobreaker.Settings{
		Name:        "corral " + node,
		MaxRequests: 1,
		Timeout:     spread(cfg.Cooldown, 0.25, p.cfg.Rand),
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.Threshold)
		},
		IsSuccessful: func(err error) bool { return !Says(err, Unavailable) },
		// Sent again (retry.go), or failed by a trip, which acted on the
		// evidence already (down.go).
		IsExcluded: func(err error) bool { return Says(err, CallerGone|DialTimeout) || errors.Is(err, errTripped) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			// Called with gobreaker's lock held: its State may not be asked.
			if to == gobreaker.StateHalfOpen {
				b.tell(BreakerHalfOpen) // opening and closing: changed, for both ways
			}
			b.cbOpen.Store(to != gobreaker.StateClosed)
			if to == gobreaker.StateOpen {
				b.opened("corral: Redis keeps failing; circuit breaker open", b.why())
			}
			b.changed()
		},
	}
	b.cb.Store(gobreaker.NewTwoStepCircuitBreaker[any](b.settings))
	return b
}

// tell tells Stats of a change of state.
func (b *breaker) tell(to BreakerState) {
	if b.stats != nil {
		b.stats.BreakerChanged(b.node, to)
	}
}

// spread returns d spread uniformly by ±f (a fraction of it).
func spread(d time.Duration, f float64, rnd func() float64) time.Duration {
	return time.Duration(float64(d) * (1 + f*(2*rnd()-1)))
}

// allow lets one exchange with Redis through unless the breaker is open;
// done reports its outcome. recovery says every op of the exchange is the
// recovery's own, sent while tripped once the node's probe answered.
func (b *breaker) allow(recovery bool) (done func(error), err error) {
	if b == nil {
		return func(error) {}, nil
	}
	if t := b.tripped.Load(); t != nil {
		if recovery && t.recovering.Load() {
			return func(error) {}, nil // not counted: the probe decides
		}
		return nil, t.err()
	}
	done, err = b.cb.Load().Allow()
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		if cause := b.cause(); cause != nil {
			return nil, errorf("%w (%v; %w)", ErrCircuitOpen, err, cause)
		}
		return nil, errorf("%w (%v)", ErrCircuitOpen, err)
	}
	return done, err
}

// err is the error of a call the trip kept from Redis: ErrCircuitOpen,
// wrapping the evidence (errors.Is finds ErrRedisTimeout or the refused
// connection's error through it).
func (t *trip) err() error {
	if e := t.errv.Load(); e != nil {
		return e.err
	}
	cause := t.cause
	if l := t.latest.Load(); l != nil {
		cause = l.err
	}
	err := errorf("%w (since %s: %w)", ErrCircuitOpen, t.since.Format("15:04:05.000"), cause)
	t.errv.Store(&failedCall{err})
	return err
}

// trip opens the breaker at once for cause (see breaker). It reports
// whether it was not tripped already: the caller then starts the node's
// recovery probe.
func (b *breaker) trip(cause error) bool {
	if b == nil {
		return false
	}
	t := &trip{cause: cause, since: time.Now()}
	if !b.tripped.CompareAndSwap(nil, t) {
		return false
	}
	b.opened("corral: Redis cannot be used; circuit breaker open until it answers again", cause)
	b.changed()
	return true
}

// untrip closes a breaker that t tripped, once the node answered its
// recovery probe: both ways, since the failures that opened gobreaker's
// meanwhile were the same outage's, and the probe has answered for them.
func (b *breaker) untrip(t *trip) {
	if b.cbOpen.Load() {
		b.cb.Store(gobreaker.NewTwoStepCircuitBreaker[any](b.settings))
		b.cbOpen.Store(false)
	}
	if b.tripped.CompareAndSwap(t, nil) {
		b.changed()
	}
}

// opened counts and warns of an opening (at most once a minute per node;
// at debug level otherwise: a flapping node must not flood the log).
func (b *breaker) opened(msg string, cause error) {
	now := time.Now().UnixNano()
	if last := b.warned.Load(); now-last >= int64(time.Minute) && b.warned.CompareAndSwap(last, now) {
		b.log.Warn(msg, "node", b.node, "cooldown", b.cfg.Cooldown, errAttr(cause))
	} else {
		b.log.Debug(msg, "node", b.node, errAttr(cause))
	}
}

// changed tells the Observer and Stats when the breaker as a whole (either
// way of opening) opens or closes, and adds up the time it was open.
func (b *breaker) changed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	open := b.cbOpen.Load() || b.tripped.Load() != nil // under mu: the last to change it decides
	switch {
	case open && b.openSince.IsZero():
		b.openSince = time.Now()
		b.tell(BreakerOpen)
	case !open && !b.openSince.IsZero():
		b.wasOpen += time.Since(b.openSince)
		b.openSince = time.Time{}
		if b.tripped.Load() == nil {
			b.log.Info("corral: Redis answers again; circuit breaker closed", "node", b.node)
		}
		b.tell(BreakerClosed)
	}
}

// openFor is how long the breaker has been open, in all, the current
// opening included: read together under mu, so it never goes down.
func (b *breaker) openFor() time.Duration {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openSince.IsZero() || b.frozen {
		return b.wasOpen
	}
	return b.wasOpen + time.Since(b.openSince)
}

// freeze stops the time open from counting: the Pipeline closed, and a
// breaker left open by an outage is no longer anybody's outage.
func (b *breaker) freeze() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.openSince.IsZero() && !b.frozen {
		b.wasOpen += time.Since(b.openSince)
	}
	b.frozen = true
}

// down reports whether the breaker keeps calls from the node now: tripped,
// or gobreaker open. Half-open is not: a call may go through, and with no
// traffic it would stay half-open for ever (Health must not report that).
func (b *breaker) down() bool {
	return b != nil && (b.tripped.Load() != nil || b.cb.Load().State() == gobreaker.StateOpen)
}

// failed remembers err, when it says Redis failed, as the latest failure of
// a call through b: the warning names it when nothing else is known (a
// silent Redis). Called before the call's done.
func (b *breaker) failed(err error) {
	if b != nil && Says(err, Unavailable) {
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
	return b != nil && (b.cbOpen.Load() || b.tripped.Load() != nil)
}
