package diagnose

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// What a Cache learns in the background at its first use, judged and
// logged. Nothing here delays or fails a call.
//
// Under maxmemory, Redis evicts keys as its maxmemory-policy says. corral's
// leases and entries all have a TTL, so every volatile-* policy may evict
// them as well as every allkeys-* policy; volatile-ttl evicts leases first,
// having the shortest TTLs. An evicted lease is not a revoked one (see
// commit.lua): its load still commits, and at most one extra load runs per
// eviction (a caller that finds the lease missing takes it and loads). An
// evicted entry is a miss. Only noeviction evicts nothing: a full Redis then
// refuses writes instead, which corral handles by serving what it holds and
// loading misses directly (ErrWriteRefused).

// policyRisk is what a policy that evicts costs, as the Cache's warning
// and Run's say it.
const policyRisk = "a lease evicted during its load costs at most one extra load per eviction, " +
	"an evicted entry is a miss, and an evicted Delete's or Set's revocation marker lets a load begun before it " +
	"store its older value after it; noeviction evicts nothing (README: Eviction policy)"

// ErrNoPolicy is the error of a CONFIG GET whose answer lacks the policy.
var ErrNoPolicy = errors.New("corral: CONFIG GET maxmemory-policy answered without it")

// MaxmemoryPolicy returns the server's maxmemory-policy, or ErrNoPolicy
// when it answers without it (a proxy, say).
func MaxmemoryPolicy(ctx context.Context, rdb redis.Cmdable) (string, error) {
	m, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", err
	}
	return policyIn(m)
}

// policyIn returns the maxmemory-policy a CONFIG GET answered, or
// ErrNoPolicy when its answer lacks it.
func policyIn(conf map[string]string) (string, error) {
	if p, ok := conf["maxmemory-policy"]; ok {
		return p, nil
	}
	return "", ErrNoPolicy
}

// evicts reports whether maxmemory-policy p may evict corral's keys: every
// policy but noeviction, volatile-* ones too, since all of corral's keys
// have a TTL.
func evicts(p string) bool { return p != "noeviction" }

// WarnPolicies judges the maxmemory-policy of each master (by address; ""
// for the one server) that a CONFIG GET read, or its error, and warns when
// one may evict corral's keys. A user without the right to CONFIG GET
// (NOPERM, or the command renamed away, as managed services do) is told
// that the policy could not be read, and why. It reports false when Redis
// did not answer, so that the check is tried again later. maxmemory is not
// read: 0 (no limit) evicts nothing today, but CONFIG SET may set it at any
// time, so the policy alone decides.
func WarnPolicies(log *slog.Logger, policies map[string]string, err error) (answered bool) {
	switch {
	case err != nil && !transport.Says(err, transport.Reply) && !errors.Is(err, ErrNoPolicy):
		return false // unreachable, or silent: the calls say so
	case err != nil:
		log.Info("corral: could not read Redis's maxmemory-policy to learn whether it evicts keys; "+
			"a policy that does costs at most one extra load per evicted lease, and a miss per evicted entry",
			errprefix.Attr(errPrefix, err))
		return true
	}
	var evicting []string
	for node, p := range policies {
		switch {
		case !evicts(p):
		case node == "":
			evicting = append(evicting, p)
		default:
			evicting = append(evicting, node+"="+p)
		}
	}
	if len(evicting) > 0 {
		sort.Strings(evicting)
		log.Warn("corral: Redis may evict corral's keys (its maxmemory-policy is not noeviction): "+policyRisk,
			"maxmemory-policy", strings.Join(evicting, " "))
	}
	return true
}

// WarnPubSub says what a pub/sub mode (its mark, and Redis's refusal of
// PUBLISH for wire.AnnounceNone) costs: without the right to publish on
// corral's channels, waiters re-check on their own (a warning, naming the
// ACL rule to grant); with plain pub/sub where sharded was not disabled
// (noShard), each notice reaches every node (at debug level).
func WarnPubSub(log *slog.Logger, mark byte, refusal, prefix string, noShard bool) {
	switch {
	case mark == wire.AnnounceNone:
		right := RightOf(refusal, prefix)
		what := "publish on corral's channels"
		if right != "" && !strings.HasPrefix(right, "channels ") {
			what = "run " + right // the command, not the channels
		}
		log.Warn("corral: the ACL user may not "+what+"; waiters re-check on their own (within 250 ms of a commit) instead of hearing notices",
			"grant", GrantFor(right, prefix))
	case mark == wire.AnnouncePlain && !noShard:
		log.Debug("corral: sharded pub/sub unavailable (Redis 6, or SPUBLISH denied); using PUBLISH")
	}
}
