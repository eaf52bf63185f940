package transport

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Op is one command in the pipeline.
type Op struct {
	Ctx   context.Context // when it ends before the op is sent, the op is dropped
	Build func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	// Rebuild sends a script with its source, after the server answered
	// NOSCRIPT (nil for plain commands).
	Rebuild func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	// Script is the script Build runs, if any: after a NOSCRIPT, one op of
	// each script in a batch goes with its source (Rebuild), and the others
	// with the SHA, behind it, so that a cold server (restarted, failed
	// over, flushed) is not sent the source once per op.
	Script *redis.Script
	Key    string // a Redis key the command touches: on a Cluster, where it is sent
	Size   int    // bytes the command or its reply carries, when known
	Clock  bool   // the op needs the server's clock: its batch reads TIME first (Result.Now)
	// Clocked, when set, reads the server's clock from the op's reply (ok
	// false when it has none): a batch whose ops needing the clock come
	// after it on its node reads no TIME.
	Clocked func(redis.Cmder) (t time.Time, ok bool)
	Read    []any // a read-only command's arguments, which may be sent alone (inline.go)
	// NewRead makes Read's command, inline and pipelined alike, when Build
	// is nil: a command whose reply costs fewer allocations than
	// redis.NewCmd's (redis.NewStringSliceCmd). A plain function, not a
	// closure, so that setting it allocates nothing. nil: redis.NewCmd.
	NewRead  func(ctx context.Context, args ...any) redis.Cmder
	ReadOnly bool      // the command only reads: sent again when a live node's reply came too late (retry.go)
	ReadBy   time.Time // when an inline read of it ends at the latest: its caller's deadline (zero for none)
	Recovery bool      // sent by a tripped node's recovery, before the callers' ops (down.go)
	// Finish is called once, by the pipeline, with the op's result. Do
	// sets it; Send and SendAll need it, or Finisher, set.
	Finish func(Result)
	// Finisher, when Finish is nil, is told the op's result instead: an op
	// that is a field of its caller's value (a peek) finishes without a
	// closure made for it.
	Finisher interface{ Finished(Result) }
	// Arrived, when set, is called by Do with the op's command when it got
	// a reply that is no error, in the pipeline's goroutine, before Do's
	// caller is woken: what must happen as soon as the reply is read (a
	// lease's grant held for renewal), not when that caller is scheduled.
	Arrived func(redis.Cmder)
	// Urgent ops go ahead of the queued ones, and may take one sender
	// beyond maxBatches: lease renewals, which must reach Redis within the
	// lease's TTL however many ops wait.
	Urgent bool

	one      [1]*Op      // the op alone, as an inline read's group (no slice made for it)
	dctx     deadlineCtx // an inline read's context (none made for it)
	node     *nodeRef    // the node it must go to (DoEach); nil: its key's
	noscript int8        // the server lacked the script: 1 send it behind its source, 2 with its source
	timed    bool        // sent again for want of a clock (Clocked): its batch reads TIME
	retryBy  time.Time   // a "not now" reply's retries end (retryLater)
	resendBy time.Time   // a send that could not connect is tried again until (sendAgain)
}

// Result is what became of an op: its command, the server's clock (Unix
// ms, for clock ops) when the batch ran, or an error that kept it from
// running.
type Result struct {
	Cmd redis.Cmder
	Now int64
	Err error
}

// Answer gives o the result r as the pipeline would: for an op whose
// command went folded into another's (epochs' ReadBeside).
func (o *Op) Answer(r Result) { o.finish(r) }

// finish tells o's result to Finish, or else to Finisher.
func (o *Op) finish(r Result) {
	if o.Finish != nil {
		o.Finish(r)
		return
	}
	o.Finisher.Finished(r)
}

// IsCluster reports whether rdb is a Cluster's client.
func IsCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}
