package flights

import (
	"context"
	"sync"
	"testing"
)

// call is a call under way, as a test starts it.
type call struct {
	ctx  context.Context
	stop context.CancelFunc
}

// start returns a start for Join that makes a call, and the call it made.
func start(made **call) func() (*call, bool) {
	return func() (*call, bool) {
		ctx, stop := context.WithCancel(context.Background())
		*made = &call{ctx: ctx, stop: stop}
		return *made, true
	}
}

// The first caller starts the key's call; the next ones join it, and
// JoinRunning joins only a call under way.
func TestJoin(t *testing.T) {
	var g Group[*call]
	if _, ok := g.JoinRunning("k"); ok {
		t.Fatal("JoinRunning joined a call of an empty Group")
	}
	var made *call
	c, joined, ok := g.Join("k", start(&made))
	if c != made || joined || !ok {
		t.Fatalf("Join = %p, %v, %v; want the call started (%p), not joined", c, joined, ok, made)
	}
	again, joined, ok := g.Join("k", func() (*call, bool) { t.Fatal("started a second call"); return nil, false })
	if again != c || !joined || !ok {
		t.Fatalf("Join = %p, %v, %v; want %p joined", again, joined, ok, c)
	}
	if r, ok := g.JoinRunning("k"); r != c || !ok {
		t.Fatalf("JoinRunning = %p, %v; want %p", r, ok, c)
	}
	if _, joined, ok := g.Join("other", func() (*call, bool) { return nil, false }); joined || ok {
		t.Fatal("a start that could not start was joined or ok")
	}
	if _, ok := g.JoinRunning("other"); ok {
		t.Fatal("a call start could not start is under way")
	}
}

// The last caller to leave a call that only waits cancels it and removes
// it; earlier ones do not.
func TestLeaveCancelsWaiting(t *testing.T) {
	var g Group[*call]
	var c *call
	g.Join("k", start(&c))
	g.JoinRunning("k")
	g.Leave("k", c, c.stop)
	if c.ctx.Err() != nil {
		t.Fatal("cancelled while a caller still waits")
	}
	g.Leave("k", c, c.stop)
	if c.ctx.Err() == nil {
		t.Fatal("the last caller left, and the call runs on")
	}
	if _, ok := g.JoinRunning("k"); ok {
		t.Fatal("a cancelled call is still joined")
	}
	if g.StartLoading(c.ctx, "k", c) {
		t.Fatal("StartLoading of a cancelled call")
	}
}

// A call that loads runs on when its callers leave, and is still joined.
func TestLeaveKeepsLoading(t *testing.T) {
	var g Group[*call]
	var c *call
	g.Join("k", start(&c))
	if !g.StartLoading(c.ctx, "k", c) {
		t.Fatal("StartLoading refused a call under way")
	}
	g.Leave("k", c, c.stop)
	if c.ctx.Err() != nil {
		t.Fatal("a loading call was cancelled")
	}
	if r, ok := g.JoinRunning("k"); r != c || !ok {
		t.Fatal("a loading call whose callers left is not joined")
	}
}

// A detached call is no longer joined, nor cancelled when its callers
// leave, and Finish of it leaves the key's next call in place.
func TestDetach(t *testing.T) {
	var g Group[*call]
	var c, next *call
	g.Join("k", start(&c))
	g.Detach("k")
	g.Join("k", start(&next))
	if next == c {
		t.Fatal("joined a detached call")
	}
	g.Leave("k", c, c.stop)
	g.Finish("k", c, make(chan struct{}))
	if c.ctx.Err() != nil {
		t.Fatal("the last caller of a detached call cancelled it")
	}
	if r, ok := g.JoinRunning("k"); r != next || !ok {
		t.Fatal("Finish of a detached call removed the key's next one")
	}
	done := make(chan struct{})
	g.Finish("k", next, done)
	<-done // answered
	if _, ok := g.JoinRunning("k"); ok {
		t.Fatal("a finished call is still joined")
	}
	var a, b *call
	g.Join("a", start(&a))
	g.Join("b", start(&b))
	g.DetachAll()
	for _, key := range []string{"a", "b"} {
		if _, ok := g.JoinRunning(key); ok {
			t.Fatalf("%s joined after DetachAll", key)
		}
	}
}

// Callers that join and leave concurrently cancel a call once, after the
// last of them.
func TestConcurrent(t *testing.T) {
	var g Group[*call]
	var c *call
	g.Join("k", start(&c))
	var wg sync.WaitGroup
	for range 8 {
		if _, ok := g.JoinRunning("k"); !ok {
			t.Fatal("JoinRunning missed the call")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.Leave("k", c, c.stop)
		}()
	}
	wg.Wait()
	if c.ctx.Err() != nil {
		t.Fatal("cancelled while the first caller waits")
	}
	g.Leave("k", c, c.stop)
	if c.ctx.Err() == nil {
		t.Fatal("not cancelled once every caller left")
	}
}

// Await takes the answer of a call answered, and leaves a call whose
// caller's context ended first: the last such caller cancels it.
func TestAwait(t *testing.T) {
	var g Group[*call]
	var c *call
	g.Join("k", start(&c))
	g.JoinRunning("k")
	done := make(chan struct{})
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if g.Await(ended, "k", c, done, c.stop) {
		t.Fatal("Await of an unanswered call reported an answer to an ended context")
	}
	if c.ctx.Err() != nil {
		t.Fatal("cancelled while a caller still waits")
	}
	close(done)
	if !g.Await(ended, "k", c, done, c.stop) {
		t.Fatal("Await missed the answer of a call answered as the context ended")
	}
	if !g.Await(context.Background(), "k", c, done, c.stop) {
		t.Fatal("Await missed the answer")
	}
	if c.ctx.Err() != nil {
		t.Fatal("a caller that took the answer left the call")
	}
	g.Leave("k", c, c.stop)
	if c.ctx.Err() == nil {
		t.Fatal("the last caller left, and the call runs on")
	}
}

// Hand moves a call's callers to a call of another Group; a caller that
// leaves afterwards leaves that call. When the caller that began the call
// left before, one of the others takes its place (Claim), once.
func TestHand(t *testing.T) {
	var peeks Group[*int]
	var flights Group[*string]
	p, f := new(int), new(string)
	for range 3 {
		peeks.Join("k", func() (*int, bool) { return p, true })
	}
	var h Handover[*string]
	if to, handed := Leave(&h, &peeks, p, "k", true); handed || to != nil {
		t.Fatal("left a call not handed over, and was told it was")
	}
	started := 0
	joined, ok := Hand(&h, &peeks, p, &flights, "k", func(callers int) (*string, bool) { started = callers; return f, true })
	if !ok || joined != 1 || h.To() != f || started != 2 {
		t.Fatalf("Hand = %d, %v; want 1 joined of the 2 callers left", joined, ok)
	}
	if _, ok := peeks.JoinRunning("k"); ok {
		t.Fatal("the handed-over call is still joinable")
	}
	if !h.Claim() || h.Claim() {
		t.Fatal("the first caller's place was not claimable exactly once")
	}
	if to, handed := Leave(&h, &peeks, p, "k", false); !handed || to != f {
		t.Fatal("a caller leaving after the hand-over was not told to leave the new call")
	}
	var h2 Handover[*string]
	if _, ok := Hand(&h2, &peeks, p, &flights, "k", func(int) (*string, bool) { return f, true }); ok {
		t.Fatal("a call no longer under way was handed over")
	}
}
