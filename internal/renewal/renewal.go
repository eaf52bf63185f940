// Package renewal sends a round of lease renewals (renew.lua) for a
// Cache's Watchdog: off a Cluster, one script call per MaxLeases leases;
// on a Cluster, one per lease, since a script must not span slots and the
// keys of two leases are in different slots but by chance. The calls go
// together, ahead of the queued commands (transport.Op.Urgent): one round
// trip per node, however many loads wait in the pipeline.
package renewal

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/scripts"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/watchdog"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// MaxLeases is how many leases one renew.lua call renews off a Cluster: a
// call runs in well under a millisecond, so Redis serves other clients
// between two of them.
const MaxLeases = 200

// Send renews each of rs by ttl (or the lease's own TTL), through p, and returns their replies in
// the same order. ctx ends the round: renewals not yet sent then fail.
func Send(ctx context.Context, p *transport.Pipeline, ttl time.Duration, rs []watchdog.Renewal) []watchdog.Reply {
	replies := make([]watchdog.Reply, len(rs))
	per := MaxLeases
	if p.Cluster() {
		per = 1
	}
	var ops []*transport.Op
	var wg sync.WaitGroup
	for from := 0; from < len(rs); from += per {
		chunk, out := rs[from:min(from+per, len(rs))], replies[from:min(from+per, len(rs))]
		keys, args := make([]string, 0, 2*len(chunk)), make([]any, 0, 5*len(chunk))
		for _, r := range chunk {
			l := r.Lease
			keys = append(keys, l.Key, l.Entry)
			lt := ttl
			if l.TTL > 0 {
				lt = l.TTL // a member's own
			}
			args = append(args, wire.RenewArgv(l.Token, lt, r.Deadline, r.Held, l.Seen)...)
		}
		wg.Add(1)
		ops = append(ops, &transport.Op{Ctx: ctx, Key: keys[0], Urgent: true, Script: scripts.Renew,
			Build: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
				return scripts.Renew.EvalSha(ctx, p, keys, args...)
			},
			Rebuild: func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
				return scripts.Renew.Eval(ctx, p, keys, args...)
			},
			Finish: func(res transport.Result) { defer wg.Done(); fill(out, res) },
		})
	}
	p.SendAll(ops)
	wg.Wait()
	return replies
}

// fill sets out from the reply of one renew.lua call: one reply per lease,
// or the call's error for each.
func fill(out []watchdog.Reply, res transport.Result) {
	err := res.Err
	var vals []any
	if err == nil {
		vals, err = res.Cmd.(*redis.Cmd).Slice()
	}
	for i := range out {
		switch {
		case err != nil:
			out[i].Err = err
		case i >= len(vals):
			out[i].Err = errShort
		default:
			if e, ok := vals[i].(error); ok {
				out[i].Err = e
			} else {
				out[i].Res = wire.ParseRenewal(vals[i])
			}
		}
	}
}

// errShort is the error of a lease renew.lua gave no reply for.
var errShort = errors.New("renew.lua replied for fewer leases than it was sent")
