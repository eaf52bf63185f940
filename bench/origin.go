package main

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// values is the origin's data: one value of a fixed size per key, the same
// bytes whenever it is asked (so every answer can be checked). The bytes are
// pseudo-random, so no system's compression makes them cheaper to carry.
// It is shared by every trial of a scenario. It is safe for concurrent use.
type values struct {
	size int
	mu   sync.Mutex
	m    map[string][]byte
}

func newValues(size int) *values { return &values{size: size, m: map[string][]byte{}} }

// get returns key's value; callers must not modify it.
func (v *values) get(key string) []byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	b, ok := v.m[key]
	if !ok {
		r := rand.New(rand.NewChaCha8(sha256.Sum256([]byte(key))))
		b = make([]byte, v.size)
		for i := 0; i < len(b); i += 8 {
			u := r.Uint64()
			for j := 0; j < 8 && i+j < len(b); j++ {
				b[i+j] = byte(u >> (8 * j))
			}
		}
		v.m[key] = b
	}
	return b
}

// origin is the slow source of truth behind every system: each load waits
// the origin's latency (the query and the network distance to it), then
// returns a fresh copy of the key's value. It counts the loads and their
// peak concurrency. It is safe for concurrent use.
type origin struct {
	latency time.Duration
	values  *values

	loads    atomic.Int64 // loads started
	inflight atomic.Int64 // loads running now
	peak     atomic.Int64 // the most loads ever running at once
}

// load is the loader every system is given.
func (o *origin) load(ctx context.Context, key string) ([]byte, error) {
	o.loads.Add(1)
	n := o.inflight.Add(1)
	defer o.inflight.Add(-1)
	for {
		p := o.peak.Load()
		if n <= p || o.peak.CompareAndSwap(p, n) {
			break
		}
	}
	if o.latency > 0 {
		t := time.NewTimer(o.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return append([]byte(nil), o.values.get(key)...), nil
}

// restartCount starts the counts again, for a run after a warm-up: loads
// from now on, and a peak of the loads running now. It returns the loads
// counted until now.
func (o *origin) restartCount() int64 {
	o.peak.Store(o.inflight.Load())
	return o.loads.Swap(0)
}
