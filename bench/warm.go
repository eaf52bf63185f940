package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// warmer is an Instance that needs more than one Fetch of a key to hold it
// in memory. warm returns the key's value once the instance answers it from
// memory, or an error when ctx ends first.
type warmer interface {
	warm(ctx context.Context, key string) ([]byte, error)
	// held fetches key once, and reports whether that was answered from
	// memory.
	held(ctx context.Context, key string) ([]byte, bool, error)
	// keeps reports whether the instance keeps copies in memory at all:
	// one that does not is warm after one Fetch of each key.
	keeps() bool
}

// warmTick is how often a warmer asks again.
const warmTick = time.Millisecond

// warm caches every key of sc in every instance before an outage: each
// instance, in its own goroutine, asks for the keys in turn, as a warmer
// when it is one, else with one Fetch. The instances run at once so that
// the warm-up is short: the copies a near cache holds are then young when
// Redis dies. Each key's warming is bounded by sc.Timeout.
//
// It goes round the instances twice: the first load of each key is
// committed once, by one instance, and its invalidation reaches the others
// at some time after (an instance that read the key before the commit
// holds a copy the notice then drops), possibly after that instance's own
// round ended with every key held; by the second round every commit was
// made before it began, and a copy a late notice dropped is warmed again.
func (r *runner) warm(ctx context.Context, sc *Scenario, insts []Instance, vals *values, ns string) error {
	for range 2 {
		errs := make([]error, len(insts))
		var wg sync.WaitGroup
		for i, in := range insts {
			wg.Go(func() { errs[i] = warmInstance(ctx, sc, in, vals, ns) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
	}
	return nil
}

// warmInstance warms one instance on every key, in order. A warmer goes
// over the keys again until one whole pass found every key in memory at
// once: a copy held early in the pass can still be dropped by the
// invalidation of a write made before it was read (the first load's
// commit, announced to every instance), which reaches it late.
func warmInstance(ctx context.Context, sc *Scenario, in Instance, vals *values, ns string) error {
	w, isWarmer := in.(warmer)
	isWarmer = isWarmer && w.keeps()
	for pass := 0; ; pass++ {
		held := true
		for k := range sc.Keys {
			key := keyName(k)
			kctx, cancel := context.WithTimeout(ctx, sc.Timeout)
			var v []byte
			var err error
			var inMemory bool
			switch {
			case !isWarmer:
				v, err = in.Fetch(kctx, ns+key)
			case pass > 0:
				if v, inMemory, err = w.held(kctx, ns+key); err == nil && !inMemory {
					v, err = w.warm(kctx, ns+key)
				}
			default:
				v, err = w.warm(kctx, ns+key)
			}
			held = held && inMemory
			cancel()
			if err := check(v, err, key, vals); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
		if !isWarmer || held {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// keeps reports whether the instance has a near cache.
func (c *corralInstance) keeps() bool { return c.near }

// held reports whether a Fetch of key is answered from the near cache.
func (c *corralInstance) held(ctx context.Context, key string) ([]byte, bool, error) {
	before := c.cache.Stats().NearHits
	v, err := c.Fetch(ctx, key)
	return v, c.cache.Stats().NearHits > before, err
}

// warm fetches key until corral answers it from its near cache, seen as
// Stats.NearHits rising across a Fetch (only the warm-up's goroutine asks
// this instance, so the rise is its own). The first Fetches go to Redis:
// one loads, and a copy is kept only once the invalidation stream is up
// and a read of Redis found the entry. Without a near cache, one Fetch is
// all there is.
func (c *corralInstance) warm(ctx context.Context, key string) ([]byte, error) {
	tick := time.NewTicker(warmTick)
	defer tick.Stop()
	for {
		before := c.cache.Stats().NearHits
		v, err := c.Fetch(ctx, key)
		if err != nil || !c.near || c.cache.Stats().NearHits > before {
			return v, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not answered from the near cache: %w", ctx.Err())
		case <-tick.C:
		}
	}
}
