package corral

import (
	"context"

	"github.com/corralhq/corral/internal/diagnose"
	"github.com/corralhq/corral/internal/scripts"
	"github.com/redis/go-redis/v9"
)

// This file holds Check: what a Cache learns about its Redis at its first
// use (internal/diagnose's Checks, pubsub.go, internal/near), asked all at once
// and graded, for a service's start-up or `corral check`. The steps are in
// internal/diagnose.

// Severity grades a Finding of Check: its String is "ok", "warning" or
// "failure", as JSON says it too.
type Severity = diagnose.Severity

// The grades of a Finding.
const (
	// SeverityOK: as corral needs it.
	SeverityOK = diagnose.OK
	// SeverityWarning: corral works and keeps its guarantees, doing less
	// than it could (the Finding says what).
	SeverityWarning = diagnose.Warning
	// SeverityFailure: a guarantee of corral's would break (the Finding
	// says which), or nothing would be cached at all.
	SeverityFailure = diagnose.Failure
)

// Finding is one thing Check looked at: its Topic, Severity and Detail
// (see internal/diagnose's Finding for each field).
type Finding = diagnose.Finding

// Report is what Check found: one Finding per topic, and the facts behind
// them (the server's version, its mode, the pub/sub mode, eviction
// policies, missing rights, the round trip; see internal/diagnose's Report
// for each field). Its Err method returns nil when no Finding is a
// failure, and otherwise an error wrapping ErrCheckFailed that names each
// failure.
type Report = diagnose.Report

// CheckPings is how many PINGs Check sends, one after another, to measure
// the round-trip time.
const CheckPings = 10

// Check asks Redis, as the user rdb logs in as, what a Cache made with
// New(rdb, opts) would meet there (opts may be nil), and grades each
// finding. A service can call it at start-up and refuse to start on
// report.Err(); `corral check` prints it.
//
// It does in the foreground, at once, what a Cache does in the background
// at its first use, and a little more: it reads the server's version, mode
// and role (HELLO, or INFO), learns the pub/sub mode (publishing an empty
// message on the channel Prefix:probe) and tries to subscribe, reads
// maxmemory-policy and maxmemory (CONFIG GET), runs internal/scripts/rights.lua by
// EVAL and EVALSHA on the key Prefix:probe (which it deletes again), tries
// CLIENT ID, CLIENT TRACKING (turned off again) and a subscription to
// __redis__:invalidate, and times CheckPings PINGs. On a Cluster, version
// and policy are read from every master; the rest is tried on the master
// that serves Prefix:probe (each node keeps its own ACL users: keep them
// alike).
//
// Failures (SeverityFailure; report.Err() is not nil):
//   - Redis older than 5.0: corral's scripts write after TIME, which needs
//     effects replication.
//   - A replica, a Sentinel, or a Cluster node reached with a client for a
//     single server: corral's writes would be refused or redirected, and
//     nothing would be cached.
//   - A missing key or command right (EVALSHA, SET, keys Prefix:*, ...):
//     the calls that need it return ErrPermission, uncached.
//   - A median round trip of RedisTimeout or more: calls would fail as
//     silent Redis, and Fetch fail open.
//
// Warnings (SeverityWarning): Redis 5 (no near cache) or a version that
// could not be read; masters of different versions; notices that cannot be
// published or heard (waiters re-check on their own, within 250 ms of a
// commit), or plain pub/sub where sharded was refused; a maxmemory-policy
// that evicts (an evicted lease costs an extra load, an evicted entry is a
// miss, an evicted revocation marker lets a load begun before a Delete or
// Set store its older value after it: the Cache warns the same), with or
// without a maxmemory yet, or a policy that could not be read; the near
// cache's rights missing while opts.NearCache is on; a median round trip of
// 100 ms or more (hits read inline give up, and nodes are probed).
//
// Check returns an error, and no Report, for invalid opts (wrapping
// ErrInvalidOptions), or when Redis cannot be checked: a PING that fails
// (unreachable, or the login refused), a command that gets no reply, or
// ctx's end. ctx bounds it only with a client that bounds its I/O by the
// context (ContextTimeoutEnabled); otherwise the client's own timeouts do.
func Check(ctx context.Context, rdb redis.UniversalClient, opts *Options) (*Report, error) {
	if diagnose.NilClient(rdb) {
		return nil, errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return diagnose.Check(ctx, diagnose.Config{
		Client: rdb, Prefix: o.Prefix, Timeout: o.RedisTimeout, NoShard: o.DisableShardedPubSub,
		NearCache: o.NearCache.Size > 0, Rights: scripts.Rights, Pings: CheckPings,
	})
}
