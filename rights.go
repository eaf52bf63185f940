package corral

import (
	"context"
	"errors"

	"github.com/corralhq/corral/internal/diagnose"
)

// This file holds the check corral makes of its rights, once per Cache, once
// Redis has answered: New's warm-up starts it, or else the first call that
// gets an answer (New itself never waits for Redis).
// Nothing here fails a call: a missing right is logged once here, and the
// calls that need it return ErrPermission (or, for channels, waiters
// re-check on their own).

// firstUse starts the checks in the background the first time it is called
// (after the first reply from Redis: a Redis that is down is not checked).
func (c *Cache) firstUse() {
	if c.warn.checked.Load() || !c.warn.checked.CompareAndSwap(false, true) {
		return
	}
	c.tasks.Start(func() {
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RedisTimeout)
		defer cancel()
		c.diagnoseRights(ctx)
	})
}

// diagnoseRights learns the pub/sub mode (store.pubsub), then tries, in one
// script on a key under Prefix, each command corral's scripts and hit path
// run (ACL rules apply inside scripts as outside). It logs each right the
// ACL user lacks once. (A user that may publish but not subscribe is not
// caught here: its waiters' subscriptions are never confirmed, and they
// re-check on their own.)
func (c *Cache) diagnoseRights(ctx context.Context) {
	mode, err := c.store.pubsub(ctx)
	if err != nil {
		return // Redis is failing: the calls say so
	}
	diagnose.WarnPubSub(c.opts.Logger, mode.mark, mode.refusal, c.opts.Prefix, c.opts.DisableShardedPubSub)
	refused, err := c.store.rights(ctx)
	if err != nil {
		c.rightMissing(err)
		return
	}
	for _, msg := range refused {
		c.rightDenied(msg)
	}
}

// rightMissing logs err when it is a right Redis denied.
func (c *Cache) rightMissing(err error) {
	if errors.Is(err, ErrPermission) {
		c.permissionDenied(err)
	}
}
