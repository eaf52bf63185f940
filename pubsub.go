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
// Ready waits for it (c.warmed).
func (c *Cache) warmUp() {
	c.warmed = make(chan struct{})
	started := c.tasks.Start(func() {
		defer close(c.warmed)
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		c.settle(ctx)
	})
	if !started {
		close(c.warmed)
	}
}

// settle learns the pub/sub mode and, Redis having answered, opens the
// pub/sub connection and starts the checks of a first use (each once, so
// again is harmless): warmUp's work, and Ready's when warmUp's failed.
func (c *Cache) settle(ctx context.Context) error {
	if _, err := c.store.pubsub(ctx); err != nil {
		return err
	}
	c.notify.Open(ctx)
	c.firstUse()
	c.diagnoseSoon()
	return nil
}

// publishCommand returns the command the scripts publish notices with.
func (s *store) publishCommand(ctx context.Context) (string, error) {
	m, err := s.pubsub(ctx)
	return m.Publish, err
}

// Ready waits until the Cache has made the round trips New starts in the
// background (New does not wait, so that it succeeds while Redis is down):
// it has learnt the pub/sub mode, which a miss needs before its fetch.lua,
// and begun opening its pub/sub connection. Call it before taking traffic,
// or from a readiness probe: a stampede on an instance just started would
// otherwise wait for the probe, read late by the busy process (in
// docs/design.md 3.3, the load began 25-35 ms later in the worst of 60).
//
// It returns nil once ready, and from then on at once, sending nothing;
// ctx.Err() when ctx ends first; ErrClosed after Close; while Redis cannot
// be used, an error wrapping ErrCircuitOpen or ErrRedisTimeout (a later
// call tries Redis again once the circuit breaker lets calls through). A
// Cache not ready answers every call all the same.
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
	return c.closedErr(c.settle(ctx))
}
