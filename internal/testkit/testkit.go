// Package testkit holds the small helpers corral's tests share across
// packages: polling a condition with a deadline (the tests' one way to wait
// for something that happens elsewhere, instead of sleeping), and a buffer
// that concurrent writers (a logger, a child process's output) may share.
package testkit

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond every tick until it holds, and fails t when it
// still does not within the bound. what says what was waited for.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyEvery(t, within, 5*time.Millisecond, what, cond)
}

// EventuallyEvery is Eventually with a polling interval of tick.
func EventuallyEvery(t testing.TB, within, tick time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, tick, cond) {
		t.Fatalf("not within %v: %s", within, what)
	}
}

// Within polls cond every tick until it holds, for at most within, and
// reports whether it did: for a caller that says more than Eventually
// when it did not.
func Within(within, tick time.Duration, cond func() bool) bool {
	deadline := time.After(within)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for !cond() {
		select {
		case <-deadline:
			return false
		case <-ticker.C:
		}
	}
	return true
}

// Buffer is a bytes.Buffer safe for concurrent use by writers and
// readers of what was written.
type Buffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
