package near

import (
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// Held keeps what fail-open loads returned, for fail-safe use, in a cache
// without the near cache (which keeps them as copies of its own, with
// PutFailOpen): while Redis cannot be used, a key is then loaded at most
// once per process while its value is held.
type Held struct {
	c   *otter.Cache[string, *Value]
	seq atomic.Uint64 // bumped by every Forget
}

// Value is what a fail-open load returned, held until Until.
type Value struct {
	Val   []byte
	Err   error   // the not-found error, or nil
	Until int64   // served until this (Clock)
	Took  float64 // the load's duration, ms
}

// NewHeld returns an empty Held of at most size values and maxBytes bytes
// of them.
func NewHeld(size int, maxBytes int64) *Held {
	floor := uint32(max(maxBytes/int64(size), 1)) // so that at most size fit
	return &Held{c: otter.Must(&otter.Options[string, *Value]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       func(_ string, v *Value) uint32 { return max(uint32(min(len(v.Val), 1<<31)), floor) },
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *Value]) time.Duration {
			return time.Duration(e.Value.Until - Clock())
		}),
	})}
}

// Seq is taken before a load whose result may be held (Put).
func (h *Held) Seq() uint64 { return h.seq.Load() }

// Put holds v for key, unless it has expired already, or key was
// forgotten since seq was taken: a Delete that returned during the load
// must not be undone by it.
func (h *Held) Put(key string, v *Value, seq uint64) {
	if v.Until <= Clock() || h.seq.Load() != seq {
		return
	}
	h.c.Set(key, v)
	if h.seq.Load() != seq {
		h.c.Invalidate(key) // a Forget came between the check and the Set
	}
}

// Get returns key's value while it may be served.
func (h *Held) Get(key string) (*Value, bool) {
	v, ok := h.c.GetIfPresent(key)
	if !ok || Clock() >= v.Until {
		return nil, false
	}
	return v, true
}

// Took returns how long the load of key's held value took (ms).
func (h *Held) Took(key string) (float64, bool) {
	v, ok := h.c.GetIfPresent(key)
	if !ok {
		return 0, false
	}
	return v.Took, true
}

// Forget drops key's value, and keeps a load under way from holding its
// result.
func (h *Held) Forget(key string) {
	h.seq.Add(1)
	h.c.Invalidate(key)
}

// ForgetAll drops every value, and keeps a load under way from holding
// its result.
func (h *Held) ForgetAll() {
	h.seq.Add(1)
	h.c.InvalidateAll()
}

// Close stops otter's goroutines.
func (h *Held) Close() { h.c.StopAllGoroutines() }
