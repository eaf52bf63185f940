// Package failopen owns the mechanism of a Cache's fail-open loads and
// fail-safe memory: the one load per key under way in a process (Group),
// which callers join rather than ask the origin again; what the process
// holds of its keys for fail-safe use, kept, found and forgotten (Memory,
// over internal/near's near cache and held values); and the plan of a
// caller rescued before its deadline while Redis is silent (Rescue,
// WaitAll); the mark of a fail-open load's context (LoadMark).
//
// It knows keys, loads, clocks and that memory, nothing else: what a load
// returns is its caller's type (R); when memory may answer a call, what is
// counted or told, and how a load meets a lease or a flight stay in the
// root package. It may not touch Redis or a Cache.
package failopen

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A Load is a fail-open load of a key: under way until End, then holding
// its Result.
type Load[R any] struct {
	done   chan struct{} // closed by End, once Result is set
	Result R
}

// Done returns a channel closed once l has its Result.
func (l *Load[R]) Done() <-chan struct{} { return l.done }

// End records that l has its Result, and wakes its joiners.
func (l *Load[R]) End() { close(l.done) }

// Ended reports whether l has its Result.
func (l *Load[R]) Ended() bool { return IsClosed(l.done) }

// Group holds the fail-open loads of a process, one per key at most: under
// way, or ended a little while ago (DropAfter). The zero value is ready.
type Group[R any] struct {
	mu sync.Mutex          // guards m
	m  map[string]*Load[R] // the fail-open load of each key
}

// Get returns key's load, or nil.
func (g *Group[R]) Get(key string) *Load[R] {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key]
}

// Drop removes key's load l (any, when l is nil).
func (g *Group[R]) Drop(key string, l *Load[R]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l == nil || g.m[key] == l {
		delete(g.m, key)
	}
}

// DropAll drops every load (a group invalidation), as Drop does.
func (g *Group[R]) DropAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.m)
}

// DropAfter removes key's load l after d, unless it was dropped or
// replaced before.
func (g *Group[R]) DropAfter(d time.Duration, key string, l *Load[R]) {
	time.AfterFunc(d, func() { g.Drop(key, l) })
}

// Claim returns key's load under way (mine false); or, when held reports
// that memory answers the caller instead, nil; or a new load for the
// caller to run and End (mine true). held runs under g's lock, so that a
// load that kept its result before it ended is seen either way.
func (g *Group[R]) Claim(key string, held func() bool) (l *Load[R], mine bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.m[key]; l != nil && !l.Ended() {
		return l, false
	}
	if held() {
		return nil, false
	}
	if g.m == nil {
		g.m = make(map[string]*Load[R])
	}
	l = &Load[R]{done: make(chan struct{})}
	g.m[key] = l
	return l, true
}

// A LoadMark marks a fail-open load's context (Marked): Ask records that
// its loader asked whether it runs fail-open (the root's IsFailOpen), so
// that its result may differ from a leased load's.
type LoadMark struct{ asked atomic.Bool }

// markKey is the context key of a LoadMark.
type markKey struct{}

// Marked returns ctx marked as a fail-open load's, and its mark.
func Marked(ctx context.Context) (context.Context, *LoadMark) {
	m := &LoadMark{}
	return context.WithValue(ctx, markKey{}, m), m
}

// MarkOf returns the mark of ctx, a fail-open load's context, or nil.
func MarkOf(ctx context.Context) *LoadMark {
	m, _ := ctx.Value(markKey{}).(*LoadMark)
	return m
}

// Ask records that the loader asked.
func (m *LoadMark) Ask() { m.asked.Store(true) }

// Asked reports whether the loader asked.
func (m *LoadMark) Asked() bool { return m.asked.Load() }

// IsClosed reports whether ch is closed.
func IsClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
