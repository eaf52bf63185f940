// Package batch gathers the loads of the flights one FetchMany started
// into calls of its loadMany. Each key of a FetchMany that needs a flight
// gets one, as Fetch would, and each flight follows the single-key
// protocol: it takes its key's lease, or waits for another process's, or
// serves a stale entry and refreshes it. Only the load differs: a flight's
// loader (Loader) asks the Batch for its key's result, and the Batch calls
// loadMany once for all the keys whose flights asked. Each key is still
// loaded under its own lease, committed (or handed back) on its own, by its
// own flight.
//
// A Batch waits for each flight it was told of (Expect) to decide: to ask
// to load (its loader runs), or not to for now (Decided: it waits for
// another process's lease, or it ended without loading), and for its owner
// to have started every flight it will (Started). Then it calls loadMany
// for the keys that asked, one round, in a goroutine Config.Start runs. A flight
// that asks later (it took over a lease whose holder died, say) finds no
// flight undecided, and its key gets a round of its own.
//
// It owns the rounds: who is undecided, when a round's call is due, a
// call's guard against a panic, runtime.Goexit or its deadline, each key's
// part of a round's answer, and the pace of a batch's flights (Paced); and the per-key bookkeeping of a FetchMany that needs no
// Cache (keys.go). It may not touch Redis, leases, flights or the Cache:
// it learns of flights only through Expect, Decided, Started and the
// loaders it hands out, and how a call is bounded (its context, the load
// timeout, Close) and which errors it says are its Config's.
package batch

import (
	"context"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/tasks"
)

// Config is what a Batch needs of its owner.
type Config struct {
	// Call calls loadMany once for keys (a copy it may keep or change):
	// vals holds the values of the keys found, failed the keys that failed
	// on their own; err fails every key of the call. A key in neither was
	// not found. ctx is Context, bounded by Timeout and ended with Owner.
	Call func(ctx context.Context, keys []string) (vals map[string][]byte, failed map[string]error, err error)
	// Context is the calls' context (nil: context.Background), Timeout
	// bounds each call (0: none): a call still running then is abandoned,
	// its keys failed with Cut's error, as they are once Owner ends (nil:
	// never). Cut says which end a call met; nil: the context's error.
	Context, Owner context.Context
	Timeout        time.Duration
	Cut            func() error
	// Start runs task in a goroutine its owner waits for, and reports
	// false when it cannot (the owner is closed): the round then fails
	// with Closed.
	Start func(task func()) bool
	// Panicked is the error of every key of a call that panicked with v
	// (stack is the panicking goroutine's).
	Panicked func(v any, stack []byte) error
	// Exited is the error of every key of a call that called
	// runtime.Goexit; Closed, of a round that could not start; NotFound,
	// of a key a call did not return.
	Exited, Closed, NotFound error
	// Pace, if above 0, bounds how many of the batch's flights are busy at
	// once: started and not yet decided (Expect waits for room), or handed
	// their result by a round and not yet ended (committing). A round hands
	// its keys their results in turn, as room frees, rather than waking
	// every flight at once: tens of thousands of runnable goroutines would
	// delay every other goroutine of the process (a lease renewal, a reply
	// read) by the time it takes to run them all.
	Pace int
}

// Paced is the Config.Pace of a FetchMany's batch: how many of its flights
// may be busy at once, taking their leases or committing. A FetchMany of
// 50,000 cold keys would otherwise make 50,000 goroutines runnable at each
// step, and every other goroutine of the process (the lease watchdog's, the
// pipeline's reader) wait behind them, for over a second on 2 cores: the
// leases of a 1 s LeaseTTL expired unrenewed.
const Paced = 1024

// Batch gathers the loads of the flights one caller started into rounds
// (see the package doc).
type Batch struct {
	cfg Config

	mu        sync.Mutex          // guards the fields below
	starting  bool                // the owner is still starting flights
	undecided map[string]struct{} // keys whose flight has not decided
	open      *round              // the keys waiting for the next call; nil for none
	holding   map[string]struct{} // paced: the keys whose flight holds room
	room      chan struct{}       // paced: one token per flight that holds room (Config.Pace); nil when not paced
}

// round is one call of Config.Call.
type round struct {
	keys []string
	done chan struct{} // closed once the call returned, panicked or exited
	// paced: turns[i] is closed when keys[i] may take its result (its
	// flight holds room); left[i] is set when its flight stopped waiting
	// before its turn.
	turns []chan struct{}
	left  []bool
	// set before done is closed:
	vals   map[string][]byte
	failed map[string]error
	err    error
}

// New returns a Batch whose owner is starting flights.
func New(cfg Config) *Batch {
	b := &Batch{cfg: cfg, starting: true, undecided: map[string]struct{}{}}
	if cfg.Pace > 0 {
		b.holding, b.room = map[string]struct{}{}, make(chan struct{}, cfg.Pace)
	}
	return b
}

// Expect records that a flight for key is about to start: the batch calls
// loadMany only once it decided. A paced batch first waits for room; it
// returns ctx's error if ctx ends first (the flight must not start).
func (b *Batch) Expect(ctx context.Context, key string) error {
	paced := b.room != nil
	if paced {
		select {
		case b.room <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	b.undecided[key] = struct{}{}
	if paced {
		b.holding[key] = struct{}{}
	}
	b.mu.Unlock()
	return nil
}

// free gives back the room key's flight holds, if any. b.mu is held.
func (b *Batch) free(key string) {
	if _, ok := b.holding[key]; ok {
		delete(b.holding, key)
		<-b.room
	}
}

// Started records that the owner started every flight it will.
func (b *Batch) Started() {
	b.mu.Lock()
	b.starting = false
	r := b.next()
	b.mu.Unlock()
	b.call(r)
}

// Decider returns key's flight's decided hook: Decided of key.
func (b *Batch) Decider(key string) func() {
	return func() { b.Decided(key) }
}

// Decided records that key's flight does not ask to load for now. A
// flight may report it more than once (when it starts waiting, and when it
// ends); each gives back the room it holds.
func (b *Batch) Decided(key string) {
	b.mu.Lock()
	delete(b.undecided, key)
	b.free(key)
	r := b.next()
	b.mu.Unlock()
	b.call(r)
}

// Loader returns the loader of key's flight: it asks the batch for key's
// result. ctx is the flight's load context, which bounds the wait.
func (b *Batch) Loader(key string) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		if err := ctx.Err(); err != nil {
			return nil, err // the flight gave up before its loader started
		}
		r, i, turn := b.enlist(key)
		select {
		case <-turn:
			return b.result(r, key)
		case <-ctx.Done():
			if b.room != nil {
				b.mu.Lock()
				r.left[i] = true // its turn, if given meanwhile, is freed as its flight ends
				b.mu.Unlock()
			}
			return nil, ctx.Err()
		}
	}
}

// enlist adds key to the next call, and returns that call, key's place in
// it and what closes at key's turn (the call's end when not paced). A
// paced batch frees the room key's flight held while undecided.
func (b *Batch) enlist(key string) (r *round, i int, turn chan struct{}) {
	b.mu.Lock()
	delete(b.undecided, key)
	if b.open == nil {
		b.open = &round{done: make(chan struct{})}
	}
	r, i, turn = b.open, len(b.open.keys), b.open.done
	r.keys = append(r.keys, key)
	if b.room != nil {
		b.free(key)
		turn = make(chan struct{})
		r.turns, r.left = append(r.turns, turn), append(r.left, false)
	}
	next := b.next()
	b.mu.Unlock()
	b.call(next)
	return r, i, turn
}

// next takes the open round out when its call is due: no flight is
// undecided or about to start. It returns nil otherwise. b.mu is held.
func (b *Batch) next() *round {
	if b.starting || len(b.undecided) > 0 || b.open == nil {
		return nil
	}
	r := b.open
	b.open = nil
	return r
}

// call runs r's call in a goroutine of Config.Start. r may be nil: nothing
// to do.
func (b *Batch) call(r *round) {
	if r == nil {
		return
	}
	if !b.cfg.Start(func() { b.run(r) }) {
		r.err = b.cfg.Closed
		close(r.done)
		b.handOut(r, false)
	}
}

// run calls Config.Call for r's keys. A panic becomes Panicked's error,
// and runtime.Goexit Exited, for every key of r; a call still running at
// its deadline is abandoned. Then it hands out a paced round's turns.
func (b *Batch) run(r *round) {
	defer b.handOut(r, true)
	defer close(r.done)
	ctx := b.cfg.Context
	if ctx == nil {
		ctx = context.Background()
	}
	var cancel context.CancelFunc
	if b.cfg.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, b.cfg.Timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	if b.cfg.Owner != nil {
		defer context.AfterFunc(b.cfg.Owner, cancel)()
	}
	type answer struct {
		vals   map[string][]byte
		failed map[string]error
	}
	keys := append([]string(nil), r.keys...) // loadMany may keep or change its slice
	a, err := tasks.Guard(ctx, func() (answer, error) {
		vals, failed, err := b.cfg.Call(ctx, keys)
		return answer{vals, failed}, err
	}, b.cfg.Panicked, b.cfg.Exited)
	if err != nil && ctx.Err() != nil && b.cfg.Cut != nil {
		err = b.cfg.Cut()
	}
	r.vals, r.failed, r.err = a.vals, a.failed, err
}

// owner is what ends with the Owner: nil (never) for none.
func (b *Batch) owner() <-chan struct{} {
	if b.cfg.Owner == nil {
		return nil
	}
	return b.cfg.Owner.Done()
}

// handOut gives a paced round's keys their turns, in order, each once its
// flight holds room (when paced says so: a round that failed to start has
// nothing to commit). A key whose flight left before its turn is skipped.
// Once the Owner ends, the rest get their turns without room.
func (b *Batch) handOut(r *round, paced bool) {
	if b.room == nil {
		return
	}
	for i, key := range r.keys {
		if paced {
			select {
			case b.room <- struct{}{}:
			case <-b.owner():
				paced = false
			}
		}
		b.mu.Lock()
		switch {
		case r.left[i] && paced:
			<-b.room
		case paced:
			b.holding[key] = struct{}{}
		}
		b.mu.Unlock()
		close(r.turns[i])
	}
}

// result is key's part of r's answer: its value, its own error, the
// call's error, or, for a key the call did not return, NotFound.
func (b *Batch) result(r *round, key string) ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if err, ok := r.failed[key]; ok {
		return nil, err
	}
	if v, ok := r.vals[key]; ok {
		return v, nil
	}
	return nil, b.cfg.NotFound
}
