package failopen

import (
	"time"

	"github.com/corralhq/corral/internal/near"
)

// Memory is what a process holds of its keys for fail-safe use, while it
// cannot use Redis: with the near cache (Near), its copies, and the copies
// of what fail-open loads returned; without it, those results only, in
// Held, for Throttle at most. Which of them may answer a call, and when,
// is its caller's to decide. The zero value holds nothing.
type Memory struct {
	Near     *near.Cache   // nil when the near cache is off
	Held     *near.Held    // nil with the near cache, or with fail-safe off
	Throttle time.Duration // the longest Held keeps a value
}

// A Found is what Memory holds of a key: Val the bytes, or, when Decoded,
// a copy a typed call decoded (to be encoded again for its caller); or
// Err, the not-found error of a negative entry.
type Found struct {
	Val     any
	Decoded bool
	Err     error
	Born    int64 // a near copy's entry's (near.Entry's Born and Tags), for the group invalidations
	Tags    string
}

// Bytes returns f's value when it is not Decoded.
func (f Found) Bytes() []byte {
	b, _ := f.Val.([]byte)
	return b
}

// Find returns what m holds of key for fail-safe use: any near copy when
// copies is set (the bytes first), else only a fail-open load's result.
func (m Memory) Find(key string, copies bool) (Found, bool) {
	switch {
	case m.Near != nil && copies:
		e, typ, ok := m.Near.FailSafe(key)
		switch {
		case !ok:
			return Found{}, false
		case e.Err != nil:
			return Found{Err: e.Err, Born: e.Born, Tags: e.Tags}, true
		}
		return Found{Val: e.Val, Decoded: typ != nil, Born: e.Born, Tags: e.Tags}, true
	case m.Near != nil:
		e, ok := m.Near.FailOpenCopy(key)
		if !ok {
			return Found{}, false
		}
		return Found{Val: e.Val, Err: e.Err}, true
	case m.Held != nil:
		h, ok := m.Held.Get(key)
		if !ok {
			return Found{}, false
		}
		return Found{Val: h.Val, Err: h.Err}, true
	}
	return Found{}, false
}

// A Mark is m as a fail-open load began (Memory.Mark): its result is not
// kept over an invalidation of its key that came since (Forget, or the
// near cache's own).
type Mark struct {
	snap near.Snap
	seq  uint64
}

// Mark returns m's Mark, to take before a load whose result may be kept.
func (m Memory) Mark() Mark {
	switch {
	case m.Near != nil:
		return Mark{snap: m.Near.Snapshot()}
	case m.Held != nil:
		return Mark{seq: m.Held.Seq()}
	}
	return Mark{}
}

// A Kept is what a fail-open load returned, to keep for fail-safe use.
type Kept struct {
	Val  []byte
	Err  error         // nil, or the not-found error
	Soft time.Duration // the longest it may be served, from now
	Took time.Duration // how long the load took
}

// Keep keeps k for key, unless key was invalidated since mark was taken: a
// Delete that returned during the load must not be undone by it.
func (m Memory) Keep(key string, k Kept, mark Mark) {
	now, took := near.Clock(), float64(k.Took.Microseconds())/1000
	switch {
	case m.Near != nil:
		m.Near.PutFailOpen(near.Key{Key: key}, &near.Entry{Val: k.Val, Err: k.Err, Soft: now + int64(k.Soft),
			Took: took, Size: uint32(min(len(k.Val), 1<<31))}, mark.snap)
	case m.Held != nil:
		m.Held.Put(key, &near.Value{Val: k.Val, Err: k.Err, Until: now + int64(min(m.Throttle, k.Soft)), Took: took}, mark.seq)
	}
}

// Forget drops the fail-open result m holds of key (Held's), and keeps a
// load under way from keeping its own: key was just invalidated. The near
// cache forgets its copies on its own.
func (m Memory) Forget(key string) {
	if m.Held != nil {
		m.Held.Forget(key)
	}
}

// ForgetAll is Forget of every key, the near cache's fail-open copies
// included: a group invalidation may concern any of them.
func (m Memory) ForgetAll() {
	switch {
	case m.Near != nil:
		m.Near.ForgetFailOpen()
	case m.Held != nil:
		m.Held.ForgetAll()
	}
}

// LastLoad returns how long key's latest load took, when m holds a value
// of it that says so.
func (m Memory) LastLoad(key string) (time.Duration, bool) {
	var took float64
	switch {
	case m.Near != nil:
		e, _, ok := m.Near.FailSafe(key)
		if !ok {
			return 0, false
		}
		took = e.Took
	case m.Held != nil:
		var ok bool
		if took, ok = m.Held.Took(key); !ok {
			return 0, false
		}
	}
	if took <= 0 {
		return 0, false
	}
	return time.Duration(took * float64(time.Millisecond)), true
}
