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
// cache can be made while Redis is down. Its zero value is not usable:
// make one with NewLearner.
type Learner struct {
	noShard bool
	probe   Probe

	mu   sync.Mutex           // one probe at a time
	mode atomic.Pointer[Mode] // nil until detected
}

// NewLearner returns a Learner that detects the mode with probe (Detect).
func NewLearner(noShard bool, probe Probe) *Learner {
	return &Learner{noShard: noShard, probe: probe}
}

// Learn returns the mode: sharded pub/sub where the server has it (Redis
// 7+), it is not disabled and the ACL user may use it; plain pub/sub
// otherwise; none when the user has no right to publish on the probe's
// channels. Concurrent first callers share one probe, and a probe that gets
// no answer is tried again next time.
func (l *Learner) Learn(ctx context.Context) (Mode, error) {
	if m := l.mode.Load(); m != nil {
		return *m, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.mode.Load(); m != nil {
		return *m, nil
	}
	m, err := Detect(ctx, l.noShard, l.probe)
	if err != nil {
		return Mode{}, err
	}
	l.mode.Store(&m)
	return m, nil
}

// Known returns the mode if it has been learnt, without probing.
func (l *Learner) Known() (Mode, bool) {
	if m := l.mode.Load(); m != nil {
		return *m, true
	}
	return Mode{}, false
}
