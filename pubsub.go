package corral

import (
	"context"

	"github.com/corralhq/corral/internal/notify"
)

// How this process publishes its notices (its pub/sub mode, notify.Mode),
// learnt once through the pipeline (internal/startup: start.lua, on its
// own or carried by the first peek). The scripts publish with it, lease
// tokens carry its mark, and the notifier (internal/notify) subscribes by
// it.

// rights returns what Redis refused the ACL user of the commands corral's
// scripts run (startup.Server.Rights), a right it lacks to run the check
// as ErrPermission.
func (s *store) rights(ctx context.Context) (refused []string, err error) {
	refused, err = s.start.Rights(ctx)
	return refused, denied(err)
}

// pubsub returns this process's pub/sub mode (notify.Learner.Learn): none
// when the ACL user has no right to publish on corral's channels (notices
// are still sent, fail, and are counted). It probes on first use, on a
// channel under Prefix, so New works while Redis is down.
func (s *store) pubsub(ctx context.Context) (notify.Mode, error) { return s.mode.Learn(ctx) }

// warmUp prepares, in the background as soon as the Cache is made, what the
// first calls would otherwise wait for on their way. It opens the pub/sub
// connection for the first waiters (notify's Open). On a Cluster, or a
// server that takes no folded read, it first learns the pub/sub mode: a
// lease token carries its mark, so without it an instance's first miss
// (often a whole stampede, on an instance that has just started cold) waits
// one more round trip, for the probe, before its fetch; then, Redis having
// answered, it starts the rights and eviction-policy checks the first call
// would start. On one server it sends nothing: the first peek learns all
// that in its own command (internal/startup's Server, the records'
// epochs.Starter). New does not wait. While Redis is down or silent the
// probe fails within RedisTimeout, and the first calls do all of it as
// before. Ready waits for it (c.warmed).
func (c *Cache) warmUp() {
	c.warmed = make(chan struct{})
	started := c.tasks.Start(func() {
		defer close(c.warmed)
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		if c.records.Fold.On() {
			c.notify.Open(ctx)
			return
		}
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
	return nil
}

// publishCommand returns the command the scripts publish notices with.
func (s *store) publishCommand(ctx context.Context) (string, error) {
	m, err := s.pubsub(ctx)
	return m.Publish, err
}

// Ready waits until the Cache has made its start-up (New does not wait, so
// that it succeeds while Redis is down): it has learnt the pub/sub mode,
// which a miss needs before its fetch.lua, by one command if nothing has
// yet, and begun opening its pub/sub connection. Call it from a readiness
// probe. On one server a Cache's first peek carries the start-up, so a
// stampede on an instance just started waits for nothing; on a Cluster,
// call it before taking traffic, or such a stampede waits for the start-up
// (in docs/design.md 3.3, the load began 25-35 ms later in the worst of 60).
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
