package corral

import (
	"context"

	"github.com/corralhq/corral/internal/batch"
)

// Loading a FetchMany's keys in one call: each key that needs a flight
// gets one, as Fetch would, and each flight's loader asks the FetchMany's
// batch for its key's result; the batch calls loadMany once for all the
// keys whose flights asked (internal/batch). Each key is still loaded under
// its own lease, renewed by its own watchdog, committed (or handed back) on
// its own, with its own notice, by its own flight.

// manyLoader is loadMany as a batch calls it: vals holds the values of the
// keys found, failed the keys that failed on their own (the typed
// FetchMany's encoding errors); err fails every key of the call. A key in
// neither was not found.
type manyLoader func(ctx context.Context, keys []string) (vals map[string][]byte, failed map[string]error, err error)

// loadBatch gathers the loads of the flights one FetchMany, or one rescue
// (rescue.go), started into calls of its loadMany (internal/batch).
type loadBatch struct{ *batch.Batch }

func (b loadBatch) expect(key string) { b.Expect(key) }
func (b loadBatch) started()          { b.Started() }
func (b loadBatch) loader(key string) func(context.Context) ([]byte, error) {
	return b.Loader(key)
}

// newBatch returns a batch whose calls of load each run in a goroutine the
// Cache waits for on Close, under context.WithoutCancel of ctx, bounded by
// LoadTimeout and cancelled by Close, as runLoader runs a single key's
// loader. A panic becomes a *PanicError, and runtime.Goexit
// errLoaderExited, for every key of the call; an error once the context
// ended, ErrClosed or ErrLoadTimeout. The flights' own loaders stop waiting
// at their deadline (runLoader): a loadMany that ignores its context is
// abandoned, not waited for.
func (c *Cache) newBatch(ctx context.Context, load manyLoader) loadBatch {
	call := func(keys []string) (map[string][]byte, map[string]error, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.LoadTimeout)
		defer cancel()
		defer context.AfterFunc(c.ctx, cancel)()
		vals, failed, err := load(ctx, keys)
		if err != nil && ctx.Err() != nil {
			// Most likely the context's error: say which end it met, as
			// runLoader does (ErrClosed makes the leases go back with a
			// notice to re-check, not a failure).
			err = c.loadCut()
		}
		return vals, failed, err
	}
	return loadBatch{batch.New(batch.Config{Call: call, Start: c.tasks.Start,
		Panicked: func(v any, stack []byte) error { return &PanicError{Value: v, Stack: stack} },
		Exited:   errLoaderExited, Closed: ErrClosed, NotFound: ErrNotFound})}
}
