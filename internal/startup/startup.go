// Package startup is what a Cache learns of its server once, as it starts,
// in one command (internal/scripts' start.lua): its pub/sub mode, the
// rights its ACL user lacks, and, on one server, the eviction policy. It
// runs start.lua on its own (Server.Mode's detection), or lets a Cache's
// first peek on one server carry it (Server as an epochs.Starter), so that
// a process's start costs no command of its own. A server that does not
// run the script is probed as before (notify.Detect), and the checks then
// send their own commands (rights.lua, CONFIG GET).
package startup

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/scripts"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Server is what a Cache learns of its server once. Make one with New.
type Server struct {
	// Mode learns the pub/sub mode: by start.lua, or from a first peek's
	// reply (Claim, Told).
	Mode *notify.Learner

	pipe      *transport.Pipeline
	probe     string // Prefix:probe: the probe's channel, the rights' trials' key
	noShard   bool   // Options.DisableShardedPubSub
	oneServer bool   // a client of one server: INFO tells its eviction policy
	started   atomic.Pointer[learnt]
}

// learnt is what start.lua told, for the first-use checks.
type learnt struct {
	refused []string // as rights.lua replies
	policy  string   // maxmemory_policy; "" when not read
}

// New returns the Server of a Cache whose commands go through pipe, with
// probe its Prefix:probe; noShard is Options.DisableShardedPubSub, and
// oneServer says the client is of one server (*redis.Client).
func New(pipe *transport.Pipeline, probe string, noShard, oneServer bool) *Server {
	s := &Server{pipe: pipe, probe: probe, noShard: noShard, oneServer: oneServer}
	s.Mode = notify.NewLearner(s.detect)
	return s
}

// detect learns the pub/sub mode (the Learner's Detector) by start.lua. A
// server that refuses the script (scripting denied or disabled, a proxy, a
// Cluster node reached by a client of one server: MOVED), or answers
// something else, is probed command by command instead (notify.Detect).
func (s *Server) detect(ctx context.Context) (notify.Mode, error) {
	res, err := s.pipe.Eval(ctx, scripts.Start, s.probe, flag(!s.noShard), flag(s.oneServer))
	var reply redis.Error
	switch {
	case err == nil:
		if m, ok := s.learn(res); ok {
			return m, nil
		}
	case !errors.As(err, &reply) || transport.Says(err, transport.Unavailable|transport.ClientRefused):
		return notify.Mode{}, errprefix.Errorf(errprefix.Corral, "detect pub/sub: %w", err)
	}
	return notify.Detect(ctx, s.noShard, func(ctx context.Context, command string) error {
		return s.pipe.Publish(ctx, command, s.probe)
	})
}

// learn reads start.lua's reply res: the mode, and what the first-use
// checks want (kept); false when res is no such reply.
func (s *Server) learn(res any) (notify.Mode, bool) {
	a, _ := res.([]any)
	if len(a) != 4 {
		return notify.Mode{}, false
	}
	publish, _ := a[0].(string)
	refusal, _ := a[1].(string)
	policy, _ := a[2].(string)
	s.started.Store(&learnt{refused: transport.List(a[3]), policy: policy})
	switch publish {
	case "SPUBLISH":
		return notify.Mode{Publish: publish, Mark: wire.AnnounceSharded}, true
	case "PUBLISH":
		return notify.Mode{Publish: publish, Mark: wire.AnnouncePlain}, true
	}
	return notify.Mode{Publish: "PUBLISH", Mark: wire.AnnounceNone, Refusal: refusal}, true
}

// flag is b as start.lua's ARGV has it.
func flag(b bool) string {
	if b {
		return "1"
	}
	return ""
}

// Claim is epochs.Starter's: a Cache's first peek on one server carries
// start.lua while the mode is not known and no detection is under way (it
// claims the Learner's). The peek is sent anyway, and a miss needs the
// mode before its fetch.lua: it comes with the peek's reply.
func (s *Server) Claim() (sharded, policy string, ok bool) {
	if !s.Mode.Claim() {
		return "", "", false
	}
	return flag(!s.noShard), flag(s.oneServer), true
}

// Told is epochs.Starter's: reply is start.lua's part of the peek's reply,
// or nil, and err why (notify.Learner.Told).
func (s *Server) Told(reply any, err error) {
	if m, ok := s.learn(reply); ok {
		s.Mode.Told(&m, nil)
		return
	}
	s.Mode.Told(nil, err)
}

// Rights returns what Redis refused the ACL user of the commands corral's
// scripts run: start.lua's trials, once the mode is learnt by it; else
// rights.lua's, by EVAL (it runs once; a missing EVALSHA right shows on
// the first call that needs it).
func (s *Server) Rights(ctx context.Context) (refused []string, err error) {
	if st := s.started.Load(); st != nil {
		return st.refused, nil
	}
	return s.pipe.EvalList(ctx, scripts.Rights, s.probe)
}

// ConfigGet reads CONFIG GET pattern of the server, or of each master of
// a Cluster (transport.Pipeline.ConfigGet); the eviction policy of one
// server as start.lua read it, when it did, without a command.
func (s *Server) ConfigGet(ctx context.Context, pattern string) (map[string]map[string]string, error) {
	read := false // start.lua read INFO, and found no policy there (INFO denied)
	if s.oneServer && pattern == "maxmemory-policy" {
		if _, err := s.Mode.Learn(ctx); err == nil {
			st := s.started.Load()
			if st != nil && st.policy != "" {
				return map[string]map[string]string{"": {pattern: st.policy}}, nil
			}
			read = st != nil
		}
	}
	conf, err := s.pipe.ConfigGet(ctx, pattern)
	if err != nil && read {
		err = fmt.Errorf("INFO memory gave none (denied?), then CONFIG GET: %w", err)
	}
	return conf, err
}
