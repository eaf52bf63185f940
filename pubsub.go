package corral

import (
	"context"

	"github.com/corralhq/corral/internal/notify"
)

// How this process publishes its notices (its pub/sub mode, notify.Mode),
// learnt once by a probe through the pipeline (notify.Learner, with
// store.probe). The scripts publish with it, lease tokens carry its mark,
// and the notifier (internal/notify) subscribes by it.

// pubsub returns this process's pub/sub mode (notify.Learner.Learn): none
// when the ACL user has no right to publish on corral's channels (notices
// are still sent, fail, and are counted). It probes on first use, on a
// channel under Prefix, so New works while Redis is down.
func (s *store) pubsub(ctx context.Context) (notify.Mode, error) { return s.mode.Learn(ctx) }

// warmUp learns, in the background as soon as the Cache is made, what the
// first calls would otherwise learn on their way. First the pub/sub mode: a
// lease token carries its mark, so without it an instance's first miss
// (often a whole stampede, on an instance that has just started cold) waits
// one more round trip, for the probe, before its fetch. Then, Redis having
// answered, it starts the rights and eviction-policy checks the first call
// would start, and opens the pub/sub connection for the first waiters
// (notify's Open). New does not wait. While Redis is down or silent the probe
// fails within RedisTimeout, and the first calls do all of it as before.
func (c *Cache) warmUp() {
	started := c.tasks.Start(func() {
		defer close(c.warmed)
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		if _, err := c.store.pubsub(ctx); err == nil {
			c.notify.Open(ctx)
			c.firstUse()
			c.diagnoseSoon()
		}
	})
	if !started {
		close(c.warmed)
	}
}

// publishCommand returns the command the scripts publish notices with.
func (s *store) publishCommand(ctx context.Context) (string, error) {
	m, err := s.pubsub(ctx)
	return m.Publish, err
}

// Ready waits until the Cache is ready to meet a stampede at full speed:
// until it has learnt the pub/sub mode, which its lease tokens carry (a
// miss needs it before its fetch.lua), and has begun opening its notice
// connection. New starts both in the background and does not wait, so that
// it succeeds while Redis is down; a process that takes traffic the moment
// it starts (a stampede on an instance just deployed) otherwise pays for
// them on its first misses: the probe's round trip, which a process busy
// with the stampede reads late (docs/design.md, section 3.3: the load
// began 2-4 ms later at the median, and 25-35 ms later in the worst of 60
// stampedes). Call Ready before taking traffic, or from a readiness probe.
//
// It returns nil once the Cache is ready, and from then on at once,
// sending nothing. Otherwise: ctx.Err() when ctx ends first; ErrClosed after
// Close; an error wrapping ErrCircuitOpen or ErrRedisTimeout while Redis is
// unreachable or silent (within RedisTimeout of the call), or Redis's
// refusal; the next call tries again. A Cache that is not ready answers
// every call all the same, failing open while Redis is down: Ready changes
// only when those round trips are made. The start-up checks of rights and
// of the eviction policy go on in the background.
func (c *Cache) Ready(ctx context.Context) error {
	if err := c.ready(ctx, nil, false); err != nil {
		return err
	}
	select {
	case <-c.warmed:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
	if _, err := c.store.pubsub(ctx); err != nil {
		return c.closedErr(err)
	}
	c.notify.Open(ctx)
	return nil
}
