// Package diagnose is what corral learns about its Redis, as the user a
// client logs in as: Run asks all of it at once and grades each finding,
// for corral.Check (a service's start-up, `corral check`); Warn* judge what
// a Cache learns in the background at its first use, and log it; Checks
// start those first-use checks, once (rights) or until answered (eviction
// policy). It sends only the commands it is given the client for; the
// Cache's own first-use reads go through the Cache's store (ChecksConfig's
// callbacks), and it may not decide when a Cache first used Redis: the
// Cache calls Checks.Rights and Checks.Policy.
package diagnose

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Config is what Run needs of the cache it checks for.
type Config struct {
	Client    redis.UniversalClient
	Prefix    string        // Options.Prefix
	Timeout   time.Duration // Options.RedisTimeout
	NoShard   bool          // Options.DisableShardedPubSub
	NearCache bool          // the near cache is on
	// Rights is internal/scripts/rights.lua: it tries each command corral's
	// scripts and hit path run, and returns Redis's refusals.
	Rights *redis.Script
	// Pings is how many PINGs time the round trip.
	Pings int
}

// Run asks Redis what a Cache would meet there, and grades each finding
// (see corral.Check). It returns an error when Redis could not be checked:
// a command that got no reply, or ctx's end.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	k := &checker{rdb: cfg.Client, cfg: cfg, probe: wire.ProbeName(cfg.Prefix), r: &Report{Missing: []string{}}}
	for _, step := range []func(context.Context) error{
		k.nodes, k.server, k.pubsub, k.eviction, k.rights, k.tracking, k.rtt,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return k.r, nil
}

// Check is corral.Check's work: a PING, then Run, each error said as
// NotChecked says it.
func Check(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Client.Ping(ctx).Err(); err != nil {
		return nil, NotChecked(ctx, cfg.Client, cfg.Timeout, err, true)
	}
	r, err := Run(ctx, cfg)
	if err != nil {
		return nil, NotChecked(ctx, cfg.Client, cfg.Timeout, err, false)
	}
	return r, nil
}

// NilClient reports whether rdb is nil, or a nil pointer in the interface.
func NilClient(rdb redis.UniversalClient) bool {
	v := reflect.ValueOf(rdb)
	return rdb == nil || v.Kind() == reflect.Pointer && v.IsNil()
}

// checker runs Check's steps.
type checker struct {
	rdb   redis.UniversalClient
	cfg   Config
	probe string // Prefix's probe key and channel
	r     *Report

	masters map[string]checkNode // by address; "" for a single server
	node    *redis.Client        // the server of probe; nil for a client of another kind
	version version              // the oldest master's
}

// checkNode is what Check asks of a server's client.
type checkNode interface {
	redis.Cmdable
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// nodes finds the masters, and the node that serves the probe key.
func (k *checker) nodes(ctx context.Context) error {
	switch c := k.rdb.(type) {
	case *redis.ClusterClient:
		k.r.Cluster = true
		var mu sync.Mutex
		k.masters = map[string]checkNode{}
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			k.masters[m.Options().Addr] = m
			return nil
		})
		if err != nil {
			return errorf("the Cluster's masters: %w", err)
		}
		if k.node, err = c.MasterForKey(ctx, k.probe); err != nil {
			return errorf("the master of %s: %w", k.probe, err)
		}
	case *redis.Client:
		k.masters, k.node = map[string]checkNode{"": c}, c
	default:
		k.masters = map[string]checkNode{"": k.rdb}
	}
	k.r.Masters = len(k.masters)
	return nil
}

// errPrefix begins the text of every error corral returns, once.
const errPrefix = errprefix.Corral

// errorf is fmt.Errorf for corral's errors (see corral's errorf).
func errorf(format string, args ...any) error {
	return errprefix.Errorf(errPrefix, format, args...)
}
