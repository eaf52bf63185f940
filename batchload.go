package corral

import (
	"context"
	"runtime/debug"
	"sync"
)

// Loading a FetchMany's keys in one call. Each key of a FetchMany that
// needs a flight gets one, as Fetch would, and each flight follows the
// single-key protocol (resolve.go): it takes its key's lease, or waits for
// another process's, or serves a stale entry and refreshes it. Only the
// load differs: a flight's loader asks the FetchMany's loadBatch for its
// key's result, and the batch calls loadMany once for all the keys whose
// flights asked. Each key is still loaded under its own lease, renewed by
// its own watchdog, committed (or handed back) on its own, with its own
// notice, by its own flight.
//
// The batch waits for each flight it started to decide: to ask to load
// (enlist), or not to for now (its flight's decided hook: it waits for
// another process's lease, or it ended without loading). Then it calls
// loadMany for the keys that asked, in a goroutine of its own. A flight that
// asks later (it took over a lease whose holder died, say) finds no flight
// undecided, and its key gets a call of its own.

// manyLoader is loadMany as a batch calls it: vals holds the values of the
// keys found, failed the keys that failed on their own (the typed
// FetchMany's encoding errors); err fails every key of the call. A key in
// neither was not found.
type manyLoader func(ctx context.Context, keys []string) (vals map[string][]byte, failed map[string]error, err error)

// loadBatch gathers the loads of the flights one FetchMany started into
// calls of its loadMany (see above).
type loadBatch struct {
	c    *Cache
	ctx  context.Context // the FetchMany caller's: calls run under context.WithoutCancel of it
	load manyLoader

	mu        sync.Mutex          // guards the fields below
	starting  bool                // FetchMany is still starting flights
	undecided map[string]struct{} // keys whose flight has not decided
	open      *loadRound          // the keys waiting for the next call; nil for none
}

// loadRound is one call of a batch's loadMany.
type loadRound struct {
	keys []string
	done chan struct{} // closed once the call returned, panicked or exited
	// set before done is closed:
	vals   map[string][]byte
	failed map[string]error
	err    error
}

func (c *Cache) newBatch(ctx context.Context, load manyLoader) *loadBatch {
	return &loadBatch{c: c, ctx: ctx, load: load, starting: true, undecided: map[string]struct{}{}}
}

// expect records that a flight for key is about to start: the batch calls
// loadMany only once it decided.
func (b *loadBatch) expect(key string) {
	b.mu.Lock()
	b.undecided[key] = struct{}{}
	b.mu.Unlock()
}

// started records that FetchMany started every flight it will.
func (b *loadBatch) started() {
	b.mu.Lock()
	b.starting = false
	r := b.next()
	b.mu.Unlock()
	b.call(r)
}

// decider returns key's flight's decided hook.
func (b *loadBatch) decider(key string) func() {
	return func() { b.decided(key) }
}

// decided records that key's flight does not ask to load for now. A flight
// may report it more than once (when it starts waiting, and when it ends).
func (b *loadBatch) decided(key string) {
	b.mu.Lock()
	delete(b.undecided, key)
	r := b.next()
	b.mu.Unlock()
	b.call(r)
}

// loader returns the loader of key's flight: it asks the batch for key's
// result. ctx is the flight's load context (runLoader's), which bounds the
// wait.
func (b *loadBatch) loader(key string) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		if err := ctx.Err(); err != nil {
			return nil, err // the flight gave up before its loader started
		}
		r := b.enlist(key)
		select {
		case <-r.done:
			return r.result(key)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// enlist adds key to the next call, and returns that call.
func (b *loadBatch) enlist(key string) *loadRound {
	b.mu.Lock()
	delete(b.undecided, key)
	if b.open == nil {
		b.open = &loadRound{done: make(chan struct{})}
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
func (b *loadBatch) next() *loadRound {
	if b.starting || len(b.undecided) > 0 || b.open == nil {
		return nil
	}
	r := b.open
	b.open = nil
	return r
}

// call runs loadMany for r in a goroutine that the Cache waits for on
// Close. r may be nil: nothing to do.
func (b *loadBatch) call(r *loadRound) {
	if r == nil {
		return
	}
	if !b.c.tasks.Start(func() { b.run(r) }) {
		r.err = ErrClosed
		close(r.done)
	}
}

// run calls loadMany for r's keys under context.WithoutCancel of the
// FetchMany caller's context, bounded by LoadTimeout and cancelled by
// Close, as runLoader runs a single key's loader. A panic becomes a
// *PanicError, and runtime.Goexit errLoaderExited, for every key of r; an
// error once the context ended, ErrClosed or ErrLoadTimeout.
// The flights' own loaders stop waiting at their deadline (runLoader): a
// loadMany that ignores its context is abandoned, not waited for.
func (b *loadBatch) run(r *loadRound) {
	c := b.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), c.opts.LoadTimeout)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	returned := false
	defer func() {
		if p := recover(); p != nil {
			r.vals, r.failed, r.err = nil, nil, &PanicError{Value: p, Stack: debug.Stack()}
		} else if !returned {
			r.vals, r.failed, r.err = nil, nil, errLoaderExited
		}
		close(r.done)
	}()
	keys := append([]string(nil), r.keys...) // loadMany may keep or change its slice
	r.vals, r.failed, r.err = b.load(ctx, keys)
	returned = true
	if r.err != nil && ctx.Err() != nil {
		// Most likely the context's error: say which end it met, as
		// runLoader does (ErrClosed makes the leases go back with a
		// notice to re-check, not a failure).
		r.err = c.loadCut()
	}
}

// result is key's part of r's answer: its value, its own error, the
// call's error, or, for a key loadMany did not return, ErrNotFound (cached
// as a negative entry).
func (r *loadRound) result(key string) ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if err, ok := r.failed[key]; ok {
		return nil, err
	}
	if v, ok := r.vals[key]; ok {
		return v, nil
	}
	return nil, ErrNotFound
}
