package diagnose

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The steps of Run that try the user's rights: the commands corral's
// scripts run (rights.lua, as a Cache runs it at its first use), pub/sub (as
// a Cache learns its mode), and the near cache's tracking (internal/near).

// subscribeWait bounds the wait for a subscription's confirmation.
const subscribeWait = 5 * time.Second

// rights runs rights.lua by EVAL, then by EVALSHA: each command the
// scripts run, on the probe key. Any right missing here is a failure: the
// calls that need it return ErrPermission.
func (k *checker) rights(ctx context.Context) error {
	var missing []string
	var other error  // a refusal that is not about rights (MOVED, say)
	scripted := true // the commands inside the scripts were tried
	refused := func(msg string, err error) {
		if right := RightOf(msg, k.cfg.Prefix); right != "" {
			missing = append(missing, right)
		} else if other == nil {
			other = err
		}
	}
	res, err := k.cfg.Rights.Eval(ctx, k.rdb, []string{k.probe}).Result()
	switch {
	case err == nil:
		list, _ := res.([]any)
		for _, msg := range list {
			refused(fmt.Sprint(msg), errors.New(fmt.Sprint(msg))) // Redis's words
		}
	case transport.Says(err, transport.Reply):
		scripted = false
		refused(err.Error(), err)
	default:
		return errorf("EVAL rights.lua: %w", err)
	}
	// Loaded by the EVAL (or not, if that was refused: NOSCRIPT then
	// means the right to EVALSHA is there).
	err = k.cfg.Rights.EvalSha(ctx, k.rdb, []string{k.probe}).Err()
	switch {
	case err != nil && !transport.Says(err, transport.Reply):
		return errorf("EVALSHA rights.lua: %w", err)
	case err != nil && !transport.Says(err, transport.NoScript):
		refused(err.Error(), err)
	}
	missing = compact(missing)
	k.r.missing(missing...)
	switch {
	case len(missing) > 0 && !scripted:
		k.r.add("rights", Failure, "missing: %s: every call needs them (ErrPermission); the commands inside the scripts could not be tried", strings.Join(missing, ", "))
	case len(missing) > 0:
		k.r.add("rights", Failure, "missing: %s: the calls that need them return ErrPermission, and nothing is cached for them", strings.Join(missing, ", "))
	case other != nil:
		k.r.add("rights", Warning, "not tried: Redis answered %v", other)
	default:
		k.r.add("rights", OK, "EVAL, EVALSHA and the commands of corral's scripts, on keys %s:*", k.cfg.Prefix)
	}
	return nil
}

// RightOf names the right that Redis's error message msg says is missing:
// a command ("EVALSHA", "CONFIG GET"), or "keys P:*" or "channels P:*" for
// prefix P. It returns "" for a message that is not about rights.
func RightOf(msg, prefix string) string {
	var command string // rights.lua's "... (SET)"
	if i := strings.LastIndex(msg, " ("); i >= 0 && strings.HasSuffix(msg, ")") {
		msg, command = msg[:i], msg[i+2:len(msg)-1]
	}
	msg, _, _ = strings.Cut(msg, " script: ") // where in a script: not the right
	switch {
	case !strings.HasPrefix(msg, "NOPERM") && !strings.Contains(msg, "The user executing the script can"):
		return ""
	case strings.Contains(msg, "keys"):
		return "keys " + prefix + ":*"
	case strings.Contains(msg, "channel"):
		return "channels " + prefix + ":*"
	}
	if _, rest, ok := strings.Cut(msg, "'"); ok { // NOPERM ... the 'client|id' command
		if name, _, ok := strings.Cut(rest, "'"); ok {
			return commandName(name)
		}
	}
	if command != "" {
		return commandName(command)
	}
	return strings.TrimSpace(msg)
}

// GrantFor is the ACL rule that grants right (RightOf's): "+publish" for
// the command PUBLISH, "&P:*" for the channels P:*, "~P:*" for the keys;
// the channels when right is unknown ("").
func GrantFor(right, prefix string) string {
	switch {
	case right == "" || strings.HasPrefix(right, "channels "):
		return "&" + prefix + ":*"
	case strings.HasPrefix(right, "keys "):
		return "~" + prefix + ":*"
	}
	return "+" + strings.ToLower(strings.ReplaceAll(right, " ", "|"))
}

func commandName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "|", " ")) }

// compact drops empty and repeated names, keeping the order.
func compact(names []string) []string {
	var out []string
	for _, n := range names {
		if n != "" && !contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// pubsub learns the pub/sub mode as a Cache would, then subscribes to the
// probe channel with the matching command. Without channel rights corral
// works, its waiters re-checking on their own: a warning.
func (k *checker) pubsub(ctx context.Context) error {
	refused := map[string]error{}
	mode, err := notify.Detect(ctx, k.cfg.NoShard, func(ctx context.Context, command string) error {
		var err error
		if command == "SPUBLISH" {
			err = k.rdb.SPublish(ctx, k.probe, "").Err()
		} else {
			err = k.rdb.Publish(ctx, k.probe, "").Err()
		}
		refused[command] = err
		return err
	})
	if err != nil {
		return err
	}
	const poll = "waiters re-check on their own (within 250 ms of a commit) instead of hearing notices"
	if mode.Mark == wire.AnnounceNone {
		k.r.PubSub = "none"
		k.r.missing(RightOf(refused["PUBLISH"].Error(), k.cfg.Prefix))
		k.r.add("pubsub", Warning, "none: PUBLISH refused (%v): %s; grant %s", refused["PUBLISH"], poll,
			GrantFor(RightOf(refused["PUBLISH"].Error(), k.cfg.Prefix), k.cfg.Prefix))
		return nil
	}
	publish, subscribe := "SPUBLISH", "SSUBSCRIBE"
	k.r.PubSub = "sharded"
	if mode.Mark == wire.AnnouncePlain {
		publish, subscribe = "PUBLISH", "SUBSCRIBE"
		k.r.PubSub = "plain"
	}
	used := fmt.Sprintf("%s (%s, %s)", k.r.PubSub, publish, subscribe)
	if err := k.subscribe(ctx, subscribe == "SSUBSCRIBE", k.probe); err != nil {
		if !transport.Says(err, transport.Reply) {
			return errorf("%s: %w", subscribe, err)
		}
		k.r.missing(RightOf(err.Error(), k.cfg.Prefix))
		k.r.add("pubsub", Warning, "%s: %s refused (%v): %s", used, subscribe, err, poll)
		return nil
	}
	switch sharded := refused["SPUBLISH"]; {
	case mode.Mark == wire.AnnounceSharded:
		k.r.add("pubsub", OK, "%s", used)
	case k.cfg.NoShard:
		k.r.add("pubsub", OK, "%s: DisableShardedPubSub", used)
	case k.version.text != "" && k.version.before(7, 0):
		k.r.add("pubsub", OK, "%s: Redis %s has no sharded pub/sub", used, k.version.text)
	default:
		k.r.missing(RightOf(sharded.Error(), k.cfg.Prefix))
		cost := ""
		if k.r.Cluster {
			cost = "; a Cluster sends every notice to every node"
		}
		k.r.add("pubsub", Warning, "%s: SPUBLISH refused (%v)%s", used, sharded, cost)
	}
	return nil
}

// subscribe subscribes to channel (sharded or not) and waits for the
// confirmation: nil, or Redis's refusal.
func (k *checker) subscribe(ctx context.Context, sharded bool, channel string) error {
	var ps *redis.PubSub
	switch {
	case sharded:
		ps = k.rdb.SSubscribe(ctx, channel)
	case k.node != nil:
		ps = k.node.Subscribe(ctx, channel)
	default:
		ps = k.rdb.Subscribe(ctx, channel)
	}
	defer ps.Close()
	_, err := ps.ReceiveTimeout(ctx, subscribeWait)
	return err
}

// tracking tries what the near cache needs: CLIENT ID, CLIENT TRACKING in
// broadcasting mode on the entries' prefix (turned off again), and a
// subscription to __redis__:invalidate. Without them the near cache
// serves nothing: a warning when the near cache is on.
func (k *checker) tracking(ctx context.Context) error {
	nearOn := k.cfg.NearCache
	level := OK
	if nearOn {
		level = Warning
	}
	switch {
	case k.node == nil:
		k.r.add("tracking", level, "not checked: a client of a kind Check does not know (%T)", k.rdb)
		return nil
	case k.version.text != "" && k.version.before(6, 0):
		k.r.add("tracking", level, "Redis %s has no CLIENT TRACKING: the near cache would serve nothing", k.version.text)
		return nil
	}
	missing, err := k.trackingRights(ctx)
	if err != nil {
		return err
	}
	k.r.missing(missing...)
	switch {
	case len(missing) == 0 && nearOn:
		k.r.add("tracking", OK, "CLIENT TRACKING, CLIENT ID and %s: the near cache is kept coherent", near.InvalidationChannel)
	case len(missing) == 0:
		k.r.add("tracking", OK, "CLIENT TRACKING, CLIENT ID and %s: a near cache could be used", near.InvalidationChannel)
	case nearOn:
		k.r.add("tracking", Warning, "missing: %s: the near cache would serve nothing (calls go to Redis)", strings.Join(missing, ", "))
	default:
		k.r.add("tracking", OK, "missing: %s, needed only by the near cache (off)", strings.Join(missing, ", "))
	}
	return nil
}

// trackingRights returns the near cache's rights that the user lacks.
func (k *checker) trackingRights(ctx context.Context) ([]string, error) {
	var missing []string
	refused := func(what string, err error) error {
		switch {
		case err == nil:
		case !transport.Says(err, transport.Reply):
			return errorf("%s: %w", what, err)
		case strings.Contains(err.Error(), "channel"):
			missing = append(missing, "channel "+near.InvalidationChannel)
		default:
			missing = append(missing, RightOf(err.Error(), k.cfg.Prefix))
		}
		return nil
	}
	conn := k.node.Conn()
	defer conn.Close()
	if err := refused("CLIENT ID", conn.ClientID(ctx).Err()); err != nil {
		return nil, err
	}
	err := conn.Do(ctx, "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", k.cfg.Prefix+":e:").Err()
	if err == nil {
		err = conn.Do(ctx, "CLIENT", "TRACKING", "OFF").Err()
	}
	if err := refused("CLIENT TRACKING", err); err != nil {
		return nil, err
	}
	if err := refused("SUBSCRIBE "+near.InvalidationChannel, k.subscribe(ctx, false, near.InvalidationChannel)); err != nil {
		return nil, err
	}
	return compact(missing), nil
}
