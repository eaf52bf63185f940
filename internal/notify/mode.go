package notify

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Mode is how a process announces and hears notices: its pub/sub mode.
// The scripts publish with it, lease tokens carry its mark, and a Notifier
// subscribes by it (Config.Mode).
type Mode struct {
	Publish string // the command the scripts publish with: SPUBLISH or PUBLISH
	// Mark is the first byte of the process's lease tokens, which tells
	// waiters elsewhere how its notices go out (wire.AnnounceSharded,
	// AnnouncePlain, or AnnounceNone without channel rights: they re-check
	// on their own).
	Mark byte
	// Refusal is Redis's refusal of PUBLISH when Mark is AnnounceNone:
	// which right is missing (a command, or the channels).
	Refusal string
}

// Probe publishes an empty message with command (SPUBLISH or PUBLISH) on a
// channel nobody subscribes to.
type Probe func(ctx context.Context, command string) error

// Detect learns the pub/sub mode by publishing with probe: SPUBLISH
// (unless noShard), then PUBLISH; the first that Redis accepts is the mode,
// none if it refuses both. A reply that refuses the command (an unknown or
// renamed command, one the ACL denies, a MOVED from a Cluster node reached
// with a client for one server) moves on to the next. Any other error is
// returned: no answer, Redis failing (transport.Unavailable: LOADING...),
// or a reply that refuses the client itself (transport.ClientRefused),
// which says nothing of its rights.
func Detect(ctx context.Context, noShard bool, probe Probe) (Mode, error) {
	var refusal string
	for _, try := range []Mode{{"SPUBLISH", wire.AnnounceSharded, ""}, {"PUBLISH", wire.AnnouncePlain, ""}} {
		if try.Mark == wire.AnnounceSharded && noShard {
			continue
		}
		var reply redis.Error
		switch err := probe(ctx, try.Publish); {
		case err == nil:
			return try, nil
		case !errors.As(err, &reply) || transport.Says(err, transport.Unavailable|transport.ClientRefused):
			return Mode{}, errprefix.Errorf(errprefix.Corral, "detect pub/sub: %w", err)
		default:
			refusal = reply.Error()
		}
	}
	return Mode{Publish: "PUBLISH", Mark: wire.AnnounceNone, Refusal: refusal}, nil
}

// Learner learns a process's Mode once, on first use (Learn), so that a
// cache can be made while Redis is down. One detection is under way at a
// time: its own (Learn's Detector), or one a command sent anyway carries
// (Claim, Told: a Cache's first peek on one server). Its zero value is not
// usable: make one with NewLearner.
type Learner struct {
	detect Detector
	mode   atomic.Pointer[Mode] // nil until learnt

	mu      sync.Mutex
	pending chan struct{} // closed when the detection under way ends; nil when none is
	failed  error         // why the last detection learnt nothing; nil when it was not Redis failing

	waiting atomic.Int32 // Learn's callers waiting for a detection under way (for tests)
}

// A Detector learns the mode as Detect does: by Detect itself, or by one
// script that probes the same way.
type Detector func(ctx context.Context) (Mode, error)

// NewLearner returns a Learner that learns the mode with detect.
func NewLearner(detect Detector) *Learner { return &Learner{detect: detect} }

// Learn returns the mode: sharded pub/sub where the server has it (Redis
// 7+), it is not disabled and the ACL user may use it; plain pub/sub
// otherwise; none when the user has no right to publish on the probe's
// channels. Concurrent first callers share one detection, and get its
// error when Redis failed; one that gets no answer is tried again next
// time. A caller that waits for another's detection stops waiting when ctx
// ends; a detection its own caller's ctx cut short is none, and a waiter
// then detects on its own.
func (l *Learner) Learn(ctx context.Context) (Mode, error) {
	for {
		m, wait := l.begin()
		switch {
		case m != nil:
			return *m, nil
		case wait == nil: // the detection is this caller's
			m, err := l.detect(ctx)
			switch {
			case err == nil:
				l.Told(&m, nil)
				return m, nil
			case ctx.Err() != nil:
				l.Told(nil, nil) // this caller's context, not Redis: others try theirs
			default:
				l.Told(nil, err)
			}
			return Mode{}, err
		}
		l.waiting.Add(1)
		select {
		case <-wait:
			l.waiting.Add(-1)
		case <-ctx.Done():
			l.waiting.Add(-1)
			return Mode{}, ctx.Err()
		}
		l.mu.Lock()
		err := l.failed
		l.mu.Unlock()
		if err != nil {
			return Mode{}, err
		}
		// Learnt; or a detection that came to nothing: try again.
	}
}

// begin returns the mode, when it is known; otherwise the channel of the
// detection under way, or, when none is, nil for both: the detection is
// the caller's from now on, and it must call Told once.
func (l *Learner) begin() (*Mode, chan struct{}) {
	if m := l.mode.Load(); m != nil {
		return m, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.mode.Load(); m != nil {
		return m, nil
	}
	if l.pending != nil {
		return nil, l.pending
	}
	l.pending = make(chan struct{})
	return nil, nil
}

// Claim lets a command sent anyway carry the detection: true when the mode
// is not known and no detection is under way. The caller must then call
// Told once, and Learn's callers wait for it meanwhile.
func (l *Learner) Claim() bool {
	m, wait := l.begin()
	return m == nil && wait == nil
}

// Told ends the detection under way (Learn's, or a Claim's): m is the mode
// it learnt; nil with err when Redis failed, nil without when it carried no
// detection after all (Learn's callers then detect on their own).
func (l *Learner) Told(m *Mode, err error) {
	if m != nil {
		l.mode.CompareAndSwap(nil, m)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed = err
	if l.pending != nil {
		close(l.pending)
		l.pending = nil
	}
}

// Known returns the mode if it has been learnt, without probing.
func (l *Learner) Known() (Mode, bool) {
	if m := l.mode.Load(); m != nil {
		return *m, true
	}
	return Mode{}, false
}
