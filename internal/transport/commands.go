package transport

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The plain commands the Cache sends besides its protocol's (scripts and
// reads of entries): each is one Op through Do, or one per master through
// DoEach, and its reply read. They know nothing of what corral keeps in
// Redis: the caller names the channel, script, pattern or key.

// do sends one command, built by build, routed by key, and returns it
// answered, or the error that kept it from Redis or that Redis replied.
func (p *Pipeline) do(ctx context.Context, key string, build func(ctx context.Context, p redis.Pipeliner) redis.Cmder) (redis.Cmder, error) {
	r := p.Do(&Op{Ctx: ctx, Key: key, Build: build})
	if r.Err != nil {
		return nil, r.Err
	}
	return r.Cmd, r.Cmd.Err()
}

// Publish publishes an empty message with command (SPUBLISH or PUBLISH)
// on channel.
func (p *Pipeline) Publish(ctx context.Context, command, channel string) error {
	_, err := p.do(ctx, channel, func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		if command == "SPUBLISH" {
			return p.SPublish(ctx, channel, "")
		}
		return p.Publish(ctx, channel, "")
	})
	return err
}

// Eval runs sc on key by EVAL (for a script run once: no EVALSHA first,
// no NOSCRIPT), with args, and returns its reply.
func (p *Pipeline) Eval(ctx context.Context, sc *redis.Script, key string, args ...any) (any, error) {
	cmd, err := p.do(ctx, key, func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return sc.Eval(ctx, p, []string{key}, args...)
	})
	if err != nil {
		return nil, err
	}
	return cmd.(*redis.Cmd).Val(), nil
}

// EvalList is Eval without args, for a script whose reply is a list: each
// element said as a string; nil for any other reply.
func (p *Pipeline) EvalList(ctx context.Context, sc *redis.Script, key string) (list []string, err error) {
	res, err := p.Eval(ctx, sc, key)
	if err != nil {
		return nil, err
	}
	return List(res), nil
}

// List is a script's reply res, a list, each element said as a string;
// nil for any other reply.
func List(res any) (list []string) {
	reply, _ := res.([]any)
	for _, v := range reply {
		list = append(list, fmt.Sprint(v))
	}
	return list
}

// ConfigGet reads the server parameters that match pattern (CONFIG GET)
// on every master of a Cluster, or on the one server of another client:
// each reply by node address ("" off a Cluster).
func (p *Pipeline) ConfigGet(ctx context.Context, pattern string) (map[string]map[string]string, error) {
	results, err := p.DoEach(ctx, func() *Op {
		return &Op{Ctx: ctx, Build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return p.ConfigGet(ctx, pattern)
		}}
	})
	if err != nil {
		return nil, err
	}
	replies := make(map[string]map[string]string, len(results))
	for node, r := range results {
		replies[node] = r.Cmd.(*redis.MapStringStringCmd).Val()
	}
	return replies, nil
}

// Type returns the type of the key name (TYPE).
func (p *Pipeline) Type(ctx context.Context, name string) (string, error) {
	cmd, err := p.do(ctx, name, func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return p.Type(ctx, name)
	})
	if err != nil {
		return "", err
	}
	return cmd.(*redis.StatusCmd).Val(), nil
}
