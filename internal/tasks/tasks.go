// Package tasks owns the goroutines a Cache runs on its own (flights,
// background refreshes, a FetchMany's loads, the first-use checks, the
// replayer) as far as starting and stopping them goes: a Group starts
// them until it is closed, and its owner waits for them to a deadline.
// Guard runs one call (a loader) in a goroutine of its own, waited for
// until a context ends, a panic or runtime.Goexit in it made an error.
//
// It may not touch what a task does, nor how a task learns that it should
// end: that is the Cache's context, cancelled by Close.
package tasks

import (
	"sync"
	"time"
)

// Group is the goroutines started through it. Its zero value is ready.
type Group struct {
	mu     sync.Mutex // guards closed, and wg.Add against Wait's wg.Wait
	closed bool
	wg     sync.WaitGroup
}

// Start runs f in a goroutine that Wait waits for, unless g is closed: it
// reports whether it started f.
func (g *Group) Start(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// Close stops new goroutines from starting. It reports false when they
// were stopped already.
func (g *Group) Close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	return true
}

// Wait waits for the goroutines started, or until deadline. It reports
// whether they all ended.
func (g *Group) Wait(deadline time.Time) bool { return WaitUntil(&g.wg, deadline) }

// WaitUntil waits for wg, or until deadline. It reports whether wg is done.
func WaitUntil(wg *sync.WaitGroup, deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
