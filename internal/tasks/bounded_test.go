package tasks

import (
	"context"
	"testing"
	"time"
)

// Bounded runs f in the Group, under a context of the parent's bounded by
// the timeout, and nothing once the Group is closed.
func TestBounded(t *testing.T) {
	var g Group
	parent, cancel := context.WithCancel(context.Background())
	run := g.Bounded(parent, time.Hour)
	done := make(chan struct{})
	run(func(ctx context.Context) {
		defer close(done)
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > time.Hour {
			t.Errorf("deadline %v, %v; want within the hour", d, ok)
		}
		cancel()
		<-ctx.Done() // the parent's end reaches it
	})
	g.Close()
	if !g.Wait(time.Now().Add(time.Minute)) {
		t.Fatal("Wait gave up")
	}
	<-done
	run(func(context.Context) { t.Error("ran after Close") })
	g.Wait(time.Now().Add(time.Minute))
}
