package tasks

import (
	"testing"
	"time"
)

// TestGroup checks that a Group waits for what it started, to a deadline,
// and starts nothing once closed.
func TestGroup(t *testing.T) {
	var g Group
	release := make(chan struct{})
	if !g.Start(func() { <-release }) {
		t.Fatal("Start refused before Close")
	}
	if !g.Close() || g.Close() {
		t.Fatal("Close: want true once, then false")
	}
	if g.Start(func() { t.Error("started after Close") }) {
		t.Fatal("Start after Close")
	}
	if g.Wait(time.Now()) {
		t.Fatal("Wait reported a blocked goroutine ended")
	}
	close(release)
	if !g.Wait(time.Now().Add(time.Minute)) {
		t.Fatal("Wait gave up on a goroutine that ended")
	}
}
