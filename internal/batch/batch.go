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
// call's guard against a panic or runtime.Goexit, and each key's part of a
// round's answer; and the per-key bookkeeping of a FetchMany that needs no
// Cache (keys.go). It may not touch Redis, leases, flights or the Cache:
// it learns of flights only through Expect, Decided, Started and the
// loaders it hands out, and how a call is bounded (its context, the load
// timeout, Close) and which errors it says are its Config's.
package batch

import (
	"context"
	"runtime/debug"
	"sync"
)

// Config is what a Batch needs of its owner.
type Config struct {
	// Call calls loadMany once for keys (a copy it may keep or change):
	// vals holds the values of the keys found, failed the keys that failed
	// on their own; err fails every key of the call. A key in neither was
	// not found.
	Call func(keys []string) (vals map[string][]byte, failed map[string]error, err error)
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
}

// Batch gathers the loads of the flights one caller started into rounds
// (see the package doc).
type Batch struct {
	cfg Config

	mu        sync.Mutex          // guards the fields below
	starting  bool                // the owner is still starting flights
	undecided map[string]struct{} // keys whose flight has not decided
	open      *round              // the keys waiting for the next call; nil for none
}

// round is one call of Config.Call.
type round struct {
	keys []string
	done chan struct{} // closed once the call returned, panicked or exited
	// set before done is closed:
	vals   map[string][]byte
	failed map[string]error
	err    error
}

// New returns a Batch whose owner is starting flights.
func New(cfg Config) *Batch {
	return &Batch{cfg: cfg, starting: true, undecided: map[string]struct{}{}}
}

// Expect records that a flight for key is about to start: the batch calls
// loadMany only once it decided.
func (b *Batch) Expect(key string) {
	b.mu.Lock()
	b.undecided[key] = struct{}{}
	b.mu.Unlock()
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
// ends).
func (b *Batch) Decided(key string) {
	b.mu.Lock()
	delete(b.undecided, key)
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
		r := b.enlist(key)
		select {
		case <-r.done:
			return b.result(r, key)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// enlist adds key to the next call, and returns that call.
func (b *Batch) enlist(key string) *round {
	b.mu.Lock()
	delete(b.undecided, key)
	if b.open == nil {
		b.open = &round{done: make(chan struct{})}
	}
	r := b.open
	r.keys = append(r.keys, key)
	next := b.next()
	b.mu.Unlock()
	b.call(next)
	return r
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
	}
}

// run calls Config.Call for r's keys. A panic becomes Panicked's error,
// and runtime.Goexit Exited, for every key of r.
func (b *Batch) run(r *round) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			r.vals, r.failed, r.err = nil, nil, b.cfg.Panicked(p, debug.Stack())
		} else if !returned {
			r.vals, r.failed, r.err = nil, nil, b.cfg.Exited
		}
		close(r.done)
	}()
	keys := append([]string(nil), r.keys...) // loadMany may keep or change its slice
	r.vals, r.failed, r.err = b.cfg.Call(keys)
	returned = true
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
