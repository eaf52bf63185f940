package demo

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// commandCounter is a go-redis hook that counts the commands a client sends,
// each command of a pipeline or transaction separately. It leaves out the
// commands go-redis sends on its own to set up a new connection (they run
// through the client's hooks too): they are connection set-up, not the
// traffic of a strategy. Pub/sub connections bypass hooks; strategies report
// those commands themselves (Instance.UnhookedCommands).
type commandCounter struct {
	n atomic.Uint64
}

var _ redis.Hook = (*commandCounter)(nil)

// setupCommands are the commands go-redis's connection initialisation sends
// (HELLO, AUTH, SELECT, CLIENT SETNAME/SETINFO/TRACKING/MAINT_NOTIFICATIONS,
// READONLY). No strategy sends any of them.
var setupCommands = map[string]bool{
	"hello": true, "auth": true, "select": true, "client": true, "readonly": true,
}

func (c *commandCounter) count(cmd redis.Cmder) {
	if !setupCommands[cmd.Name()] {
		c.n.Add(1)
	}
}

// Load returns the number of commands counted.
func (c *commandCounter) Load() uint64 { return c.n.Load() }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook {
	return next
}

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
