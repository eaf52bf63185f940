package corral

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/payload"
	"github.com/corralhq/corral/internal/renewal"
	"github.com/corralhq/corral/internal/startup"
	"github.com/corralhq/corral/internal/tasks"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/watchdog"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The one door to Redis. Every command this package sends goes through the
// store, and so through the transport's Pipeline (internal/transport),
// which applies RedisTimeout, the node's circuit breaker and one error
// classification (transport.Classify): a rule added there holds for every
// command. The commands, and the exceptions (connections a pipeline cannot
// carry, a diagnosis, the sweep after a Clear): docs/design.md, section 4.1.

// store runs corral's Redis commands through the pipeline, each bounded by
// RedisTimeout plus its payload's transfer time, and keeps the payload's
// encoding (compression, size limit) out of the protocol.
type store struct {
	pipe    *transport.Pipeline
	leases  *watchdog.Watchdog // renews every lease its Cache holds, together (lease.go)
	inline  int                // Options.NoticeInlineLimit
	version int                // Options.CodecVersion, stored with every entry
	payload payload.Codec      // Options.CompressMinBytes when Compress, MaxValueBytes
	hooks   storeHooks

	leaseTTL time.Duration   // Options.LeaseTTL: the least a revocation marker lives
	start    *startup.Server // what it learns of its server once (pubsub.go)
	mode     *notify.Learner // the pub/sub mode: start's
}

// storeHooks are what the store tells its Cache of. Each may be nil.
type storeHooks struct {
	noticeFailed func(error)                           // a notice Redis refused to publish (a write that stood)
	refusedWrite func(why string)                      // a write Redis refused (OOM, a replica)
	nodeFailed   func()                                // a call failed: its node may have failed over
	recovered    func(node string) error               // a node found down answers again; its breaker closes on a nil return (transport.Config.Recovered)
	renewalHeard func(*watchdog.Lease, watchdog.Reply) // a renewal of a lease found other than renewed
}

func newStore(rdb redis.UniversalClient, o Options, stats *counters, hooks storeHooks) *store {
	s := &store{inline: o.NoticeInlineLimit, version: o.CodecVersion,
		leaseTTL: o.LeaseTTL, hooks: hooks}
	if o.Compress {
		s.payload.CompressMin = o.CompressMinBytes
	}
	s.payload.MaxValue, s.payload.TooLarge = o.MaxValueBytes, ErrValueTooLarge
	cfg := transport.Config{Timeout: o.RedisTimeout, Rand: o.Rand, Logger: o.Logger, Recovered: hooks.recovered,
		Breaker: transport.BreakerConfig{Disable: o.DisableBreaker, Threshold: o.BreakerThreshold, Cooldown: o.BreakerCooldown},
		// The breakers' openings counted, their changes told to the Observer.
		Stats: transport.BreakerFunc(func(node string, to transport.BreakerState) {
			if to == transport.BreakerOpen {
				stats.BreakerOpens.Add(1)
			}
			observeBreaker(o, node, to)
		}),
	}
	if hooks.nodeFailed != nil {
		cfg.Failed = func(error) { hooks.nodeFailed() }
	}
	s.pipe = transport.New(rdb, cfg)
	_, oneServer := rdb.(*redis.Client)
	s.start = startup.New(s.pipe, wire.ProbeName(o.Prefix), o.DisableShardedPubSub, oneServer)
	s.mode = s.start.Mode
	s.leases = watchdog.New(watchdog.Config{TTL: o.LeaseTTL, Timeout: o.RedisTimeout, Heard: hooks.renewalHeard,
		Renew: func(rs []watchdog.Renewal) []watchdog.Reply {
			return renewal.Send(context.Background(), s.pipe, o.LeaseTTL, rs)
		}})
	return s
}

// close stops the pipeline (transport.Pipeline.Close) and the lease
// renewals, and waits briefly for its recovery probes and their rounds.
func (s *store) close() {
	tasks.WaitUntil(s.pipe.Close(), time.Now().Add(50*time.Millisecond))
	tasks.WaitUntil(s.leases.Close(), time.Now().Add(50*time.Millisecond))
}

// call runs a script through the pipeline. size is the payload it carries,
// in bytes.
func (s *store) call(ctx context.Context, sc *redis.Script, keys []string, size int, args ...any) (any, error) {
	return s.callAs(ctx, false, nil, sc, keys, size, args...)
}

// callAs is call; recovery marks the op as a tripped node's recovery's own
// (transport.Op.Recovery), which its breaker lets through before the
// callers' ops. arrived, when not nil, is given the script's reply as soon
// as the pipeline reads it (transport.Op.Arrived).
func (s *store) callAs(ctx context.Context, recovery bool, arrived func(redis.Cmder), sc *redis.Script, keys []string, size int, args ...any) (any, error) {
	r := s.pipe.Do(&transport.Op{Ctx: ctx, Key: keys[0], Size: size, Recovery: recovery, Script: sc, Arrived: arrived,
		Build:   func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return sc.EvalSha(ctx, p, keys, args...) },
		Rebuild: func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return sc.Eval(ctx, p, keys, args...) },
	})
	if r.Err != nil {
		return nil, denied(r.Err)
	}
	res, err := r.Cmd.(*redis.Cmd).Result()
	return res, denied(err)
}

// denied wraps err with ErrPermission when it is Redis refusing a command
// or key to the ACL user, and with ErrWriteRefused when Redis refuses to
// write (a write the scripts could not catch: Delete's): transport.Refused.
func denied(err error) error { return transport.Refused(err, ErrPermission, ErrWriteRefused) }

// read reads an entry's payload and flags (HMGET), allowing for size bytes
// on the wire. ok is false when the entry has no payload.
func (s *store) read(ctx context.Context, n wire.Names, size int) (payload []byte, f wire.Flags, ok bool, err error) {
	r := s.pipe.Do(&transport.Op{Ctx: ctx, Key: n.Entry, Size: size, ReadOnly: true,
		Build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
			return p.HMGet(ctx, n.Entry, wire.PayloadFields...)
		},
	})
	if r.Err == nil {
		r.Err = r.Cmd.Err()
	}
	if r.Err != nil {
		return nil, f, false, denied(r.Err)
	}
	v, f, ok := wire.ParsePayload(r.Cmd.(*redis.SliceCmd).Val())
	if !ok {
		return nil, f, false, nil
	}
	return []byte(v), f, true, nil
}

// peekArgs are a peek's HMGET's arguments.
type peekArgs = [len(wire.PeekFields) + 2]any

// peekOp makes o, with args, the read of entry's fields and the server's
// clock in one round trip, without the script or a write (the hit path),
// for the caller to set its Finish (peekResult reads the reply) and send.
// ctx ends the op only if it has not been sent yet. Set its ReadBy (the
// caller's deadline) before sending it, for an inline read to end by then.
func (s *store) peekOp(o *transport.Op, args *peekArgs, ctx context.Context, entry string) {
	args[0], args[1] = "hmget", entry
	copy(args[2:], wire.PeekFields[:])
	*o = transport.Op{Ctx: ctx, Key: entry, Clock: true, Read: args[:], ReadOnly: true, NewRead: transport.Strings}
}

// peekResult is what a peek's op got (res).
func (s *store) peekResult(res transport.Result) (peekReply, error) {
	if res.Err == nil {
		res.Err = res.Cmd.Err()
	}
	if res.Err != nil {
		return peekReply{}, errorf("peek: %w", denied(res.Err))
	}
	e, err := wire.ParsePeek(res.Cmd.(*redis.StringSliceCmd).Val())
	if err != nil {
		return peekReply{}, errorf("peek: %w", err)
	}
	return s.peeked(e, res.Now)
}

// send sends the read o inline when it may, otherwise through the
// pipeline (transport.Pipeline.Send).
func (s *store) send(o *transport.Op) { s.pipe.Send(o) }

// sendAll sends reads together: the pipeline takes them in one batch, one
// round trip per node.
func (s *store) sendAll(ops []*transport.Op) { s.pipe.SendAll(ops) }

// decode returns the value a payload (internal/payload) holds: decompressed when it was stored
// compressed, and no larger than MaxValueBytes.
func (s *store) decode(payload []byte, f wire.Flags) ([]byte, error) {
	return s.payload.Decode(payload, f.Compressed)
}

// encode returns the payload to store for w, compressed when compression is
// on, w is a value of at least CompressMinBytes, and compressing saves space.
func (s *store) encode(w entryWrite) (payload []byte, flags string) {
	if w.kind != wire.Value {
		return w.value, w.kind.Flags(false)
	}
	payload, compressed := s.payload.Encode(w.value)
	return payload, w.kind.Flags(compressed)
}
