package tasks

import (
	"context"
	"time"
)

// Bounded returns a way to run f in a goroutine of g (nothing once g is
// closed), under a context of parent's bounded by timeout: for the
// background reads a Cache makes of Redis, each bounded by RedisTimeout.
func (g *Group) Bounded(parent context.Context, timeout time.Duration) func(f func(ctx context.Context)) {
	return func(f func(ctx context.Context)) {
		g.Start(func() {
			ctx, cancel := context.WithTimeout(parent, timeout)
			defer cancel()
			f(ctx)
		})
	}
}
