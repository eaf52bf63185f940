// Package flights keeps the calls under way in a process, one per key at
// most, as x/sync's singleflight.Group keeps its calls: the root's flights
// (its flight.go) and peeks (its peek.go). A Group knows which call is
// under way for each key, and how many callers still wait for it; what a
// call does, and how it answers its callers (a channel it closes), are its
// own.
//
// A caller joins a key's call (Join, JoinRunning) and waits for it
// (Await), or leaves (Leave): the last caller to leave a call that is only
// waiting cancels it, but never one that loads (StartLoading), whose result
// other callers and processes are owed. A call that ends (Finish), or is
// detached (Detach, DetachAll), is no longer joined: later callers start
// one of their own, while it still answers those that joined it.
package flights

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Group is the calls under way, one per key at most. C is a call (a
// pointer to one). Its zero value is ready to use.
type Group[C comparable] struct {
	// Joined, when set, is told of each caller joining a call under way,
	// under the Group's lock: before that caller is counted.
	Joined func(C)
	mu     sync.Mutex         // guards m, and each call's callers and loading
	m      map[string]slot[C] // the call under way of each key
}

// slot is a key's call under way, with what the Group keeps of it. Only a
// call in m is counted: one that has left m never returns to it, so its
// callers and loading no longer decide anything.
type slot[C comparable] struct {
	call    C
	callers int  // callers still waiting
	loading bool // holds a lease: keeps running when callers leave
}

// Join returns key's call with one more caller (joined), or, when there is
// none, the call start makes (ok false when it could not: the Cache is
// closed), whose caller is the first. start runs under the Group's lock.
func (g *Group[C]) Join(key string, start func() (C, bool)) (c C, joined, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, found := g.m[key]; found {
		g.joined(s.call)
		s.callers++
		g.m[key] = s
		return s.call, true, true
	}
	if c, ok = start(); ok {
		g.put(key, c, 1)
	}
	return c, false, ok
}

// put makes c key's call, with n callers. Called with g.mu held.
func (g *Group[C]) put(key string, c C, n int) {
	if g.m == nil {
		g.m = make(map[string]slot[C])
	}
	g.m[key] = slot[C]{call: c, callers: n}
}

// Start starts key's call with n callers, those of another call that hands
// them over (the root's peek, finding no fresh entry: its peek.go), unless a
// call of key is under way or start could not make one (ok false). start
// runs under the Group's lock.
func (g *Group[C]) Start(key string, n int, start func(callers int) (C, bool)) (c C, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, found := g.m[key]; found {
		return c, false
	}
	if c, ok = start(n); ok {
		g.put(key, c, n)
	}
	return c, ok
}

// Drop removes key's call c, if it is still key's, without answering its
// callers, and returns how many still wait for it: a call that hands its
// callers over to another (Start). ok is false when c was no longer key's
// (ended, detached, or left by every caller).
func (g *Group[C]) Drop(key string, c C) (callers int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, found := g.m[key]
	if !found || s.call != c {
		return 0, false
	}
	delete(g.m, key)
	return s.callers, true
}

// A Handover is a call that may hand its callers over to a call of
// another Group (Hand), of type C: it orders the callers that leave
// (Leave) against the hand-over. Its zero value has handed nothing over.
type Handover[C comparable] struct {
	mu   sync.Mutex
	to   C
	gone bool        // the caller that began the call left
	free atomic.Bool // handed over without it: its place is for a caller to Claim
}

// Hand removes p, key's call of from, without answering its callers, and
// starts key's call of to with them (Start, with start): their answer is
// to's call's now. joined is how many of them joined it: all but one,
// the caller that began p, or, when it left, the first to Claim its place.
// ok is false, nothing handed over, when p was no longer key's (ended,
// detached, or left by every caller) or Start started nothing.
func Hand[P, C comparable](h *Handover[C], from *Group[P], p P, to *Group[C], key string, start func(callers int) (C, bool)) (joined int, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, ok := from.Drop(key, p)
	if !ok {
		return 0, false
	}
	if h.to, ok = to.Start(key, n, start); !ok {
		return 0, false
	}
	h.free.Store(h.gone)
	return n - 1, true
}

// Claim reports whether the caller is the one, of those handed over
// without the caller that began the call (it left), that takes its place:
// the first to claim it.
func (h *Handover[C]) Claim() bool { return h.free.Load() && h.free.CompareAndSwap(true, false) }

// To is the call h handed its callers over to, or the zero C.
func (h *Handover[C]) To() C {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.to
}

// Leave records that a caller of p, key's call of from, stopped waiting
// for it (first: the caller that began it): it leaves p, unless p handed
// its callers over; then it returns that call (handed), for the caller to
// leave instead.
func Leave[P, C comparable](h *Handover[C], from *Group[P], p P, key string, first bool) (to C, handed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var none C
	if h.to != none {
		return h.to, true
	}
	from.Leave(key, p, func() {})
	h.gone = h.gone || first
	return none, false
}

// JoinRunning joins key's call if one is under way: a call that finds the
// key being loaded or waited for needs no peek of its own.
func (g *Group[C]) JoinRunning(key string) (c C, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.m[key]
	if !ok {
		return c, false
	}
	g.joined(s.call)
	s.callers++
	g.m[key] = s
	return s.call, true
}

// Callers returns how many callers wait for key's call; 0 for none.
func (g *Group[C]) Callers(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key].callers
}

// joined tells Joined, if set, of a caller joining c.
func (g *Group[C]) joined(c C) {
	if g.Joined != nil {
		g.Joined(c)
	}
}

// Leave records that a caller stopped waiting for key's call c. The last
// one to leave a call that holds no lease removes it and cancels it
// (stop, under the lock, so that StartLoading sees it cancelled), so
// nothing more is sent to Redis on behalf of callers that are gone.
func (g *Group[C]) Leave(key string, c C, stop func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.m[key]
	if !ok || s.call != c {
		return // ended or detached: no longer counted
	}
	s.callers--
	if s.callers == 0 && !s.loading {
		delete(g.m, key)
		stop()
		return
	}
	g.m[key] = s
}

// Await waits for key's call c to answer its callers (done closed), or
// for ctx to end, whichever comes first: it reports false when ctx ended,
// and the caller then left c (Leave, with stop). A call answered at the
// same moment is taken as answered.
func (g *Group[C]) Await(ctx context.Context, key string, c C, done <-chan struct{}, stop func()) bool {
	// Answered already (a caller woken by it, handed over from a peek):
	// a receive that cannot block takes no lock, where a select locks
	// done, which hundreds of woken callers share, and ctx's channel.
	select {
	case <-done:
		return true
	default:
	}
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done: // answered at the same moment: take the answer
		default:
			g.Leave(key, c, stop)
			return false
		}
	}
	return true
}

// StartLoading marks key's call c as holding a lease. It reports false
// when every caller has already left and c was cancelled: ctx, c's, has
// ended.
func (g *Group[C]) StartLoading(ctx context.Context, key string, c C) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	if s, ok := g.m[key]; ok && s.call == c {
		s.loading = true
		g.m[key] = s
	}
	return true
}

// Finish removes key's call c, if it is still key's, so later calls start
// afresh, and then answers its callers: it closes done, once c's answer is
// set.
func (g *Group[C]) Finish(key string, c C, done chan struct{}) {
	g.mu.Lock()
	if s, ok := g.m[key]; ok && s.call == c {
		delete(g.m, key)
	}
	g.mu.Unlock()
	close(done)
}

// Detach removes key's call, if any, so that later calls start one of
// their own; it still answers its callers.
func (g *Group[C]) Detach(key string) {
	g.mu.Lock()
	delete(g.m, key)
	g.mu.Unlock()
}

// DetachAll is Detach of every key (a group invalidation).
func (g *Group[C]) DetachAll() {
	g.mu.Lock()
	clear(g.m)
	g.mu.Unlock()
}
