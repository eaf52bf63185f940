package corral

import (
	"context"
	"errors"

	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// How this process publishes its notices (its pub/sub mode), learnt once
// by a probe through the pipeline. The scripts publish with it, lease
// tokens carry its mark, and the notifier (internal/notify) subscribes by it.

// pubsubMode is how this process announces and hears notices.
type pubsubMode struct {
	publish string // the command the scripts publish with: SPUBLISH or PUBLISH
	// mark is the first byte of this process's lease tokens, which tells
	// waiters elsewhere how its notices go out (wire.AnnounceSharded,
	// AnnouncePlain, or AnnounceNone without channel rights: they re-check
	// on their own).
	mark byte
	// refusal is Redis's refusal of PUBLISH when mark is AnnounceNone:
	// which right is missing (a command, or the channels).
	refusal string
}

// pubsub returns this process's pub/sub mode: sharded pub/sub where the
// server has it (Redis 7+), it is not disabled and the ACL user may use it;
// plain pub/sub otherwise; none when the user has no right to publish on
// corral's channels (notices are still sent, fail, and are counted). It
// probes on first use, on a channel under Prefix, so New works while Redis
// is down; concurrent first callers share one probe, and a probe that gets
// no answer is tried again next time.
func (s *store) pubsub(ctx context.Context) (pubsubMode, error) {
	if m := s.mode.Load(); m != nil {
		return *m, nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if m := s.mode.Load(); m != nil {
		return *m, nil
	}
	m, err := detectPubsub(ctx, s.noShard, s.probe)
	if err != nil {
		return pubsubMode{}, err
	}
	s.mode.Store(&m)
	return m, nil
}

// detectPubsub learns the pub/sub mode by publishing with probe: SPUBLISH
// (unless noShard), then PUBLISH; the first that Redis accepts is the mode,
// none if it refuses both. A reply that refuses the command (an unknown or
// renamed command, one the ACL denies, a MOVED from a Cluster node reached
// with a client for one server) moves on to the next. Any other error is
// returned: no answer, Redis failing (transport.Unavailable: LOADING...),
// or a reply that refuses the client itself (transport.ClientRefused),
// which says nothing of its rights.
func detectPubsub(ctx context.Context, noShard bool, probe func(ctx context.Context, command string) error) (pubsubMode, error) {
	var refusal string
	for _, try := range []pubsubMode{{"SPUBLISH", wire.AnnounceSharded, ""}, {"PUBLISH", wire.AnnouncePlain, ""}} {
		if try.mark == wire.AnnounceSharded && noShard {
			continue
		}
		var reply redis.Error
		switch err := probe(ctx, try.publish); {
		case err == nil:
			return try, nil
		case !errors.As(err, &reply) || transport.Says(err, transport.Unavailable|transport.ClientRefused):
			return pubsubMode{}, errorf("detect pub/sub: %w", err)
		default:
			refusal = reply.Error()
		}
	}
	return pubsubMode{publish: "PUBLISH", mark: wire.AnnounceNone, refusal: refusal}, nil
}

// warmUp learns, in the background as soon as the Cache is made, what the
// first calls would otherwise learn on their way. First the pub/sub mode: a
// lease token carries its mark, so without it an instance's first miss
// (often a whole stampede, on an instance that has just started cold) waits
// one more round trip, for the probe, before its fetch. Then, Redis having
// answered, it starts the rights and eviction-policy checks the first call
// would start. New does not wait. While Redis is down or silent the probe
// fails within RedisTimeout, and the first calls do all of it as before.
func (c *Cache) warmUp() {
	c.tasks.Start(func() {
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		if _, err := c.store.pubsub(ctx); err == nil {
			c.firstUse()
			c.diagnoseSoon()
		}
	})
}

// publishCommand returns the command the scripts publish notices with.
func (s *store) publishCommand(ctx context.Context) (string, error) {
	m, err := s.pubsub(ctx)
	return m.publish, err
}
