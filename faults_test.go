package corral_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"github.com/corralhq/corral/internal/scripts"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// faults is a go-redis hook that counts the commands a client sends and can
// fail chosen ones, the client wrapper of the fault-injection tests.
type faults struct {
	commands atomic.Int64
	// before, when set, runs before a command is sent; a non-nil error fails
	// the command without sending it.
	before atomic.Pointer[func(redis.Cmder) error]
	// after, when set, runs after a command got its reply; a non-nil error
	// replaces the reply (the command did run on the server).
	after atomic.Pointer[func(redis.Cmder) error]
}

// isSetup reports whether cmd is part of go-redis's connection set-up
// (HELLO, CLIENT SETINFO, ...), which the command counts leave out.
func isSetup(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client", "auth", "select", "readonly":
		return true
	}
	return false
}

func (f *faults) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (f *faults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if b := f.before.Load(); b != nil {
			if err := (*b)(cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		if !isSetup(cmd) {
			f.commands.Add(1)
		}
		err := next(ctx, cmd)
		if a := f.after.Load(); a != nil && err == nil {
			if err := (*a)(cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return err
	}
}

// ProcessPipelineHook applies before and after to each command of a
// pipeline (corral sends its commands in pipelines): a command that before
// fails is left out of what is sent.
func (f *faults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		send := make([]redis.Cmder, 0, len(cmds))
		var failed error
		for _, cmd := range cmds {
			if b := f.before.Load(); b != nil {
				if err := (*b)(cmd); err != nil {
					cmd.SetErr(err)
					failed = err
					continue
				}
			}
			if !isSetup(cmd) {
				f.commands.Add(1)
			}
			send = append(send, cmd)
		}
		if len(send) == 0 {
			return failed
		}
		err := next(ctx, send)
		if a := f.after.Load(); a != nil {
			for _, cmd := range send {
				if cmd.Err() == nil {
					if e := (*a)(cmd); e != nil {
						cmd.SetErr(e)
					}
				}
			}
		}
		if err == nil {
			err = failed
		}
		return err
	}
}

func (f *faults) setBefore(fn func(redis.Cmder) error) { f.before.Store(&fn) }
func (f *faults) setAfter(fn func(redis.Cmder) error)  { f.after.Store(&fn) }

// faultyClient returns a client of e's server with a faults hook.
func (e *env) faultyClient() (*redis.Client, *faults) {
	f := &faults{}
	c := e.srv.Client()
	c.AddHook(f)
	return c, f
}

// scriptSHA returns the SHA1 of one of corral's scripts, as EVALSHA names it
// (internal/scripts: some are sent behind lease.lua).
func scriptSHA(t *testing.T, name string) string {
	t.Helper()
	s, ok := map[string]*redis.Script{"fetch": scripts.Fetch, "commit": scripts.Commit, "renew": scripts.Renew,
		"release": scripts.Release, "delete": scripts.Delete, "expire": scripts.Expire, "read": scripts.Read}[name]
	if !ok {
		t.Fatalf("no script %q", name)
	}
	return s.Hash()
}

// isScript reports whether cmd runs the script whose SHA1 is sha, by
// EVALSHA or (after NOSCRIPT) by EVAL.
func isScript(cmd redis.Cmder, sha string) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	s, _ := args[1].(string)
	if strings.EqualFold(name, "eval") {
		sum := sha1.Sum([]byte(s))
		s, name = hex.EncodeToString(sum[:]), "evalsha"
	}
	return strings.EqualFold(name, "evalsha") && s == sha
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, within, what, cond)
}

// waitSubscribed waits until the server counts n subscribers of channel
// (plain or sharded): a waiter is then surely listening.
func waitSubscribed(t *testing.T, rdb *redis.Client, channel string, n int64) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 2*time.Second, "subscribers of "+channel, func() bool {
		plain := rdb.PubSubNumSub(ctx, channel).Val()[channel]
		sharded := rdb.PubSubShardNumSub(ctx, channel).Val()[channel]
		return plain+sharded >= n
	})
}
