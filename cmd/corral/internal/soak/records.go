package soak

import (
	"fmt"
	"time"

	"github.com/corralhq/corral"
)

// Every time in the records is a time.Duration since the run's epoch, read
// from the wall clock of the one host that runs the orchestrator, the
// workers and Redis (whose TIME, used by corral's scripts, is that clock too).

// Load is one origin load, as the origin recorded it.
type Load struct {
	Key, Worker int
	Start       time.Duration // the worker's clock when its loader began, before the request
	Arrive      time.Duration // the origin's clock when the request arrived
	End         time.Duration // the origin's clock when the response was written (or the caller left)
	Version     int64         // the version the origin answered

	// FailOpen: corral called the loader directly, without a lease, its
	// result kept in the worker's memory and not stored in Redis
	// (corral.IsFailOpen in the loader's context). Invariant 1a leaves
	// such loads out, invariant 5 counts them, and invariant 2 traces a
	// value served from memory to one.
	FailOpen bool
	// Troubled: the worker had seen signs of Redis trouble within
	// degradedHold as the loader began (see observer), a load under a
	// lease included. The checks take it, like a degraded Interval, as
	// evidence that the worker was degraded then (eventsNear's degraded
	// workers for invariant 1a, checkFlights' allowance for 1b), which
	// survives the worker's death with its last report.
	Troubled bool
	// Cut: the worker left before the origin answered: killed, or its
	// Cache closed with the load still running past Close's grace, which
	// cancels the load and hands its lease back.
	Cut bool
}

// Call is one Fetch a worker made.
type Call struct {
	Key, Worker int
	Start, End  time.Duration
	Version     int64  // the version in the value returned; 0 with an error
	Err         string // "" for a value
	// Outcome is the call's outcome as corral told the worker's Observer
	// (corral.EventHit ... corral.EventError); 0 when unknown (plain
	// cache-aside, a call that failed, or a record from a worker that did
	// not report it).
	Outcome corral.EventKind
}

// FailSafe reports whether c was answered from its worker's memory because
// Redis could not be used (corral.EventFailSafe).
func (c Call) FailSafe() bool { return c.Outcome == corral.EventFailSafe }

// Delete is one version bump at the origin followed by a Delete of the key
// through the orchestrator's own Cache.
type Delete struct {
	Key        int
	Version    int64         // the key's version after the bump, before Delete was called
	Start, End time.Duration // Delete called, Delete returned
	Err        string        // "" when Delete returned nil
}

// Outage is one restart of the soak's Redis: killed at Down, answering again
// (empty) at Up.
type Outage struct{ Down, Up time.Duration }

// Kill is one SIGKILL of a worker.
type Kill struct {
	Worker int
	At     time.Duration
}

// Interval is a span in which a worker saw signs of Redis trouble (a failed
// Redis call, an open circuit breaker, a lost lease or a rejected commit),
// extended by degradedHold.
type Interval struct {
	Worker   int
	From, To time.Duration
}

// Breaker is a change of a worker's circuit breaker, as corral told its
// Observer: corral.EventBreakerOpen (tripped on evidence that Redis cannot
// be used, or opened by failures in a row), EventBreakerHalfOpen (opened by
// failures, its cooldown over: one call goes through) or
// EventBreakerClosed (the worker reads Redis again).
type Breaker struct {
	Worker int
	At     time.Duration
	State  corral.EventKind
}

// Failure is a worker that failed by itself: it exited without being told
// to, or did not stop when told to.
type Failure struct {
	Worker int
	At     time.Duration
	Msg    string
}

// Records are everything a run observed, the input of Check.
type Records struct {
	TTL      time.Duration
	Loads    []Load
	Calls    []Call
	Deletes  []Delete
	Outages  []Outage
	Kills    []Kill
	Degraded []Interval
	Breakers []Breaker
	Failures []Failure
	// Stopped is when the orchestrator told the workers to stop (they
	// close their Caches); 0 if it never did.
	Stopped time.Duration
}

// Invariant numbers, as `corral soak --help` lists them.
const (
	InvLoads    = 1 // loads per key per refresh
	InvStale    = 2 // no value older than a Delete after it returned
	InvDeadline = 3 // no caller past its deadline
	InvError    = 4 // no error while fail-open was possible
	InvOutage   = 5 // fail-open loads per key per worker per Redis restart
)

// InvariantNames name the invariants in reports.
var InvariantNames = map[int]string{
	InvLoads:    "loads per refresh",
	InvStale:    "stale after delete",
	InvDeadline: "deadline",
	InvError:    "error",
	InvOutage:   "fail-open loads per restart",
}

// Violation is one broken invariant.
type Violation struct {
	Invariant int           `json:"invariant"`
	Key       int           `json:"key"`    // -1 when not about a key
	Worker    int           `json:"worker"` // 0 when not about one worker
	At        time.Duration `json:"at_ns"`
	Msg       string        `json:"message"`
}

func (v Violation) String() string {
	return fmt.Sprintf("violation of invariant %d (%s) at t=%s: %s",
		v.Invariant, InvariantNames[v.Invariant], fmtT(v.At), v.Msg)
}

// Result is what Check found.
type Result struct {
	Violations []Violation

	Leased   int // loads under a lease, counted by the fleet-wide bound (invariant 1a)
	FailOpen int // fail-open loads (corral.IsFailOpen), left to invariants 1b and 5
	Bound    int // what invariant 1a allowed for the windows that had leased loads

	// The fail-open loads in Redis restarts' windows (invariant 5): how
	// many there were, the most by one worker of one key in one restart,
	// and their mean per key per worker per restart, over every worker and
	// key that worker fetched or loaded in the restart's window.
	OutageLoads int
	OutageMax   int
	OutageMean  float64
	// LongRestarts counts the restarts that kept Redis down long enough
	// for invariant 5 to allow more than FailOpenPerRestart; LongestDown
	// is the longest Up - Down of all.
	LongRestarts int
	LongestDown  time.Duration
	// FailOpenOutside counts the fail-open loads outside every restart's
	// window: a stall that made Redis look silent, say. No invariant
	// bounds them per restart (1b still does per process).
	FailOpenOutside int

	// How long after a restart's Up the workers' breakers closed (they read
	// Redis again), as the workers reported (Breakers): the most, the mean
	// (a breaker that closed before Up, Redis answering before the
	// orchestrator's PING did, counts as 0), and over how many workers and
	// restarts.
	RecoveryMax  time.Duration
	RecoveryMean time.Duration
	Recoveries   int

	// StaleJoined counts calls that returned a value older than a Delete
	// they started after, because they joined an in-process flight of their
	// worker that had started before that Delete returned (see checkStale).
	StaleJoined int
	// StaleJoinedExamples describe the first few of them.
	StaleJoinedExamples []string
	// StaleFailSafe counts calls answered from their worker's memory
	// (fail-safe) with a value older than a Delete they started after,
	// while the worker could not use Redis (around a restart, or its
	// breaker open): the documented trade-off of fail-safe (see
	// checkStale).
	StaleFailSafe int
	// StaleFailSafeExamples describe the first few of them.
	StaleFailSafeExamples []string
	// Unverifiable counts stale-looking calls that could not be judged
	// because their worker was killed right after them, so the record of
	// the flight they may have joined may have died with it.
	Unverifiable int
}
