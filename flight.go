package corral

import (
	"context"
	"sync/atomic"

	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/wire"
)

// A flight is the one in-process conversation with Redis about a key:
// concurrent Fetch calls for the key join it, so a process sends Redis one
// fetch per key however many goroutines ask, and runs at most one load.
//
// The flight runs in its own goroutine, detached from its callers: a caller
// whose context ends stops waiting and leaves; the last caller to leave
// cancels a flight that is only waiting, but never one that holds a lease
// and is loading, whose result other callers and processes are owed.
//
// A flight's whole life is in this file: a caller joins it (join, or
// Cache.flights' JoinRunning) and waits for its answer (await) or leaves
// (Cache.flights' Leave); its goroutine (run) resolves the key with Redis
// (resolve.go), answers every caller at once (finish), and only then does
// what remains (a followUp), which resolve returns rather than parks on
// the flight. The flights under way, one per key, and the count of each
// one's callers are internal/flights' Group; whether a flight loads (holds
// a lease) is marked there by its StartLoading.
type flight struct {
	key    string
	names  wire.Names
	load   loader          // the first caller's (loader.go)
	ctx    context.Context // values of the first caller; cancelled as below and by Close
	stop   context.CancelFunc
	unhook func() bool // unregisters the cancellation by Close

	how     how   // how the first caller reads (its XFetch draw, codec version, skip)
	peekErr error // the peek that started the flight found Redis failing
	// decided, for a flight a FetchMany started, tells its batch that the
	// flight will not ask to load for now: it waits for another process's
	// load, or it ended (internal/batch). nil for other flights.
	decided func()

	joinedAt atomic.Int64 // near.Clock when its last caller joined (judgeNotice)
	asking   atomic.Bool  // a fetch.lua of the flight is out, unanswered (rescue.go)
	asked    atomic.Int64 // when its first one was sent, Unix ns (its handed-over callers' silence is watched from then)
	token    string       // its lease token (resolve): run ends its lease's renewals

	done     chan struct{} // closed once answer is set
	peekDone chan struct{} // closed with done: the peek whose callers it answers too (handOff), or nil
	answer   answer        // read only after done is closed
	decoded  near.Decoded  // answer.val decoded by a Fetch[T] caller (typed.go)
}

// answer is what a flight tells its callers.
type answer struct {
	val  []byte
	err  error
	out  outcome // for Stats
	soft int64   // the soft expiry of the entry that answered; 0 when no entry did
	// until is when the answer stops being fresh (near.Clock; 0: no
	// bound known): a caller that joined the flight at or after it is
	// not given it (outLate), since a call that began after a value's TTL
	// ended must not be served it (answerFor).
	until int64
	dec   *near.Decoded // its flight's or peek's: val decoded once for its Fetch[T] callers (typed.go)
}

// outcome is how a call was answered (Stats, and the Observer's outcome
// events): each call counts exactly one, once, as it returns.
type outcome int

const (
	outNone         outcome = iota // no answer: an error of the call's own (Stats.Errors)
	outHit                         // fresh entry
	outNearHit                     // the near cache's copy
	outStale                       // stale entry
	outStaleIfError                // stale entry whose last refresh failed
	outNegative                    // negative entry
	outFailure                     // cached failure (ErrorTTL)
	outMiss                        // the flight's own load, under its lease
	outFailOpen                    // the loader ran directly: Redis failed
	outFailSafe                    // a value held in memory: Redis could not be used (failsafe.go)
	outCoalesced                   // a load another call in this process ran (see await)
	outWaited                      // another process's load, waited for
	nOutcomes

	outLate outcome = -1 // no answer: the caller joined after the flight's answer went stale, and asks again (answerFor); never counted
)

// join returns the key's flight, starting one if there is none, with
// decided as its hook (nil but for FetchMany's). ok is false when the Cache
// is closed.
func (c *Cache) join(ctx context.Context, key string, load loader, h how, peekErr error, decided func()) (f *flight, joined, ok bool) {
	return c.flights.Join(key, func() (*flight, bool) { return c.newFlight(ctx, key, load, h, peekErr, decided, nil) })
}

// newFlight starts key's flight for a first caller with ctx, load and h
// (false: the Cache is closed), answering a peek's callers too (handOff:
// peekDone, that peek's done; nil for none).
func (c *Cache) newFlight(ctx context.Context, key string, load loader, h how, peekErr error, decided func(), peekDone chan struct{}) (*flight, bool) {
	fctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f := &flight{
		key: key, names: wire.NewNames(c.opts.Prefix, key), load: load,
		ctx: fctx, stop: stop, unhook: context.AfterFunc(c.ctx, stop),
		how: h, peekErr: peekErr, decided: decided, done: make(chan struct{}), peekDone: peekDone,
	}
	near.Stamp(&f.joinedAt) // after every caller of a peek handing them over joined it
	if !c.tasks.Start(func() { c.run(f) }) {
		f.unhook()
		stop()
		return nil, false
	}
	return f, true
}

// run is a flight's goroutine: resolve the key, answer the callers, then do
// what remains (a background refresh, a commit to send again).
func (c *Cache) run(f *flight) {
	defer f.settled()
	defer func() { c.store.leases.Halt(f.token) }() // a lease granted and left unused is renewed no more (f.token as the flight ends: resolve sets it)
	a, next := c.resolve(f)
	c.finish(f, a)
	if next != nil {
		next.run(c, f)
	}
}

// settled tells f's batch, if any, that f does not ask to load for now.
func (f *flight) settled() {
	if f.decided != nil {
		f.decided()
	}
}

// await waits for f's answer or for ctx to end, whichever comes first.
// joined says the caller joined f rather than started it: an answer by f's
// load is then coalesced, not a miss, so that a load counts one miss
// however many calls it answers. at is when the caller joined f, or the
// peek f took over (near.Clock), 0 for the call that began either.
func (c *Cache) await(ctx context.Context, f *flight, joined bool, at int64) answer {
	if !c.flights.Await(ctx, f.key, f, f.done, f.stop) { // ctx ended first: the caller left f
		return answer{err: ctx.Err()}
	}
	return f.answerFor(joined, at)
}

// answerFor is f's answer, once given, for a caller that joined it or
// not (the caller that began it), at at (as for await). A caller that
// joined once the answer had gone stale is told to ask again (outLate): its
// call began after the value's TTL ended, and f, whose fetch.lua, notice
// or load came before, was still under way (its reply unread, its commit
// slow). The caller that began f, or its peek, is never late.
func (f *flight) answerFor(joined bool, at int64) answer {
	a := f.answer
	if a.val, a.err, a.out = f.answer.taken(joined, at); a.out == outLate {
		return answer{out: outLate}
	}
	a.dec = &f.decoded
	return a
}

// taken is what a caller that joined at at (joined: one that did not
// begin the flight) takes of a, as answerFor says: its value (nil with an
// error), its error and its outcome, or outLate.
func (a *answer) taken(joined bool, at int64) (val []byte, err error, out outcome) {
	if at != 0 && a.until != 0 && at >= a.until {
		return nil, nil, outLate
	}
	out = a.out
	if joined && out == outMiss {
		out = outCoalesced
	}
	if a.err != nil {
		return nil, a.err, out
	}
	return a.val, nil, out
}

// finish answers f's callers and removes f, so later calls start afresh.
func (c *Cache) finish(f *flight, a answer) {
	f.answer = a
	c.flights.Finish(f.key, f, f.done)
	if f.peekDone != nil { // handOff's callers
		close(f.peekDone)
	}
	f.unhook()
	f.stop()
}

// A followUp is what remains for a flight to do once its callers have
// their answer: a background refresh under the lease it took, a commit to
// send again, a lease to hand back. resolve returns it, and the flight's
// goroutine runs it after finish.
type followUp interface {
	run(c *Cache, f *flight)
}
