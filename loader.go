package corral

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/batch"
	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/failopen"
	"github.com/corralhq/corral/internal/tasks"
)

// The loader's guard: every run of a caller's loader, under a lease, fail-open
// or over a newer entry, goes through runLoader, which bounds it by
// LoadTimeout, ends it with Close, and turns a panic or runtime.Goexit into an
// error, so that a loader can neither hang nor crash the flight. A
// FetchMany's loadMany is bounded alike, by its batch (newBatch).

// loader is a flight's load, as the caller that started the flight gave it:
// a value that lives ttl (Fetch, Fetch[T], FetchMany: bytes), or an Entry
// that says how long it lives (FetchEntry: entry). Exactly one of bytes and
// entry is set.
type loader struct {
	ttl   time.Duration // bytes' soft TTL
	bytes func(context.Context) ([]byte, error)
	entry func(context.Context) (Entry, error)
	// batched: a FetchMany's key, whose batch's call has the LoadTimeout
	// (newBatch); its waits for the call and for its turn have none.
	batched bool
	group   string // a FetchMany's key: its batch's group leases' id (wire.Group); "" for none
}

// callLoader runs l once, and returns its value and how long it lives.
func (c *Cache) callLoader(ctx context.Context, l loader) (val []byte, fr freshness, err error) {
	if l.entry == nil {
		val, err = l.bytes(ctx)
		return val, c.freshness(l.ttl), err
	}
	e, err := l.entry(ctx)
	if err != nil {
		return e.Value, freshness{}, err
	}
	fr = c.entryFreshness(e)
	if fr.tags, err = epochs.Encode(e.Tags); err != nil {
		return nil, freshness{}, errorf("%w: %w", ErrInvalidTag, err)
	}
	return e.Value, fr, nil
}

// runLoader runs f's load under context.WithoutCancel(f.ctx), within a
// Tracer's scope, bounded by LoadTimeout (none begins once Close began, and
// one under way is cancelled at the end of Close's grace, closeGrace), and
// returns the value, how long it took, and how long it lives (fr). A panic
// becomes a *PanicError. A loader still running at the deadline is
// abandoned: its late result is dropped.
func (c *Cache) runLoader(f *flight) (val []byte, took time.Duration, fr freshness, err error) {
	return c.runLoad(f.ctx, f.key, f.load)
}

// runLoad is runLoader for key's load l, under context.WithoutCancel(ctx).
func (c *Cache) runLoad(fctx context.Context, key string, l loader) (val []byte, took time.Duration, fr freshness, err error) {
	ctx, cancel := context.WithoutCancel(fctx), context.CancelFunc(nil)
	if l.batched {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, c.opts.LoadTimeout)
	}
	defer cancel()
	if c.ctx.Err() != nil {
		return nil, 0, freshness{}, ErrClosed // closing: no load begins
	}
	defer context.AfterFunc(c.loads, cancel)()

	type result struct {
		val []byte
		fr  freshness
	}
	start := time.Now()
	c.stats.Loads.Add(1)
	lctx := c.loadStarted(ctx, key) // the loader's: a Tracer's scope in ctx
	r, err := tasks.Guard(ctx, func() (result, error) {
		v, fr, err := c.callLoader(lctx, l)
		return result{v, fr}, err
	}, newPanicError, errLoaderExited)
	val, fr = r.val, r.fr
	if err != nil && ctx.Err() != nil {
		err = c.loadCut() // most likely the context's error: say which end it met
	}
	took = time.Since(start)
	if err != nil && !isNotFound(err) && !errors.Is(err, ErrClosed) {
		c.stats.LoadErrors.Add(1)
	}
	c.loadEnded(lctx, key, took, err)
	return val, took, fr, err
}

// manyLoader is loadMany as a batch calls it: vals holds the values of the
// keys found, failed the keys that failed on their own (the typed
// FetchMany's encoding errors); err fails every key of the call. A key in
// neither was not found.
type manyLoader func(ctx context.Context, keys []string) (vals map[string][]byte, failed map[string]error, err error)

// manyLoad is a FetchMany's load: its calls (call), and how long what they
// return lives: ttl, or, for FetchManyEntries, each key's Entry as call
// last returned it (entries: key → Entry).
type manyLoad struct {
	call    manyLoader
	ttl     time.Duration
	entries *sync.Map
}

// loader is the load of key's flight, from b's calls, under group's leases.
func (ml manyLoad) loader(b *batch.Batch, key, group string) loader {
	get := b.Loader(key)
	if ml.entries == nil {
		return loader{ttl: ml.ttl, bytes: get, batched: true, group: group}
	}
	return loader{batched: true, group: group, entry: func(ctx context.Context) (Entry, error) {
		v, err := get(ctx)
		e, _ := ml.entries.Load(key)
		en, _ := e.(Entry)
		en.Value = v
		return en, err
	}}
}

// newBatch returns a batch (internal/batch) gathering the loads of the
// flights one FetchMany, or one rescue (rescue.go), started into calls of
// load; its calls of load each run in a goroutine the
// Cache waits for on Close, under context.WithoutCancel of ctx, bounded by
// LoadTimeout and cancelled at the end of Close's grace, as runLoader runs a single key's
// loader. A panic becomes a *PanicError, and runtime.Goexit
// errLoaderExited, for every key of the call; an error once the context
// ended, ErrClosed or ErrLoadTimeout. A call still running at its deadline
// is abandoned (a loadMany that ignores its context is not waited for).
// pace bounds its busy flights (batch.Config.Pace; 0 for no bound).
func (c *Cache) newBatch(ctx context.Context, load manyLoader, pace int) *batch.Batch {
	return batch.New(batch.Config{Call: load, Start: c.tasks.Start, Pace: pace,
		Context: context.WithoutCancel(ctx), Owner: c.loads, Timeout: c.opts.LoadTimeout, Cut: c.loadCut,
		Panicked: newPanicError, Exited: errLoaderExited, Closed: ErrClosed, NotFound: ErrNotFound})
}

// loadCut is the error of a load whose context ended: ErrClosed when
// Close ended it, otherwise ErrLoadTimeout (joined with
// context.DeadlineExceeded).
func (c *Cache) loadCut() error {
	if c.loads.Err() != nil { // not c.ctx: a load's own deadline may pass in Close's grace
		return ErrClosed
	}
	return errors.Join(errorf("%w after %v", ErrLoadTimeout, c.opts.LoadTimeout), context.DeadlineExceeded)
}

// isNotFound reports whether a loader said "no such record": it returned
// ErrNotFound or wrapped it. A panic carrying ErrNotFound is a failure.
func isNotFound(err error) bool {
	var pe *PanicError
	return errors.Is(err, ErrNotFound) && !errors.As(err, &pe)
}

// newPanicError is the error of a loader that panicked with v.
func newPanicError(v any, stack []byte) error { return &PanicError{Value: v, Stack: stack} }

// errLoaderExited is the error of a loader that called runtime.Goexit (for
// example through t.FailNow) instead of returning.
var errLoaderExited = errors.New("corral: loader exited without returning (runtime.Goexit)")

// IsFailOpen reports whether ctx is the context of a loader run that corral
// called directly because it could not use Redis for the call (fail-open:
// Redis refused, silent, its breaker open, writes refused on a miss; or a
// caller whose deadline could not wait): its result goes to the callers and
// to this process's memory (Options.FailSafe), and no lease was taken for
// it. When Redis answers again while it runs, or within RedisTimeout after
// it, the lease this process then takes for the key commits its value to
// Redis rather than ask the origin again; a loader that calls IsFailOpen
// and sees true opts out of that: its result (a cheaper or degraded one,
// say) is never stored in Redis, and the lease loads anew.
func IsFailOpen(ctx context.Context) bool {
	m := failopen.MarkOf(ctx) // set by failopen.Marked
	if m != nil {
		m.Ask()
	}
	return m != nil
}
