package batch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
)

// newPaced is newBatch with Config.Pace pace and Owner owner.
func newPaced(c *calls, pace int, owner context.Context) *Batch {
	b := newBatch(c, nil)
	b.cfg.Pace, b.cfg.Owner = pace, owner
	b.holding, b.room = map[string]struct{}{}, make(chan struct{}, pace)
	return b
}

// expect runs b.Expect(ctx, key) in a goroutine, and returns its error's
// channel.
func expect(ctx context.Context, b *Batch, key string) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Expect(ctx, key) }()
	return ch
}

// blocked reports whether ch stays empty while other goroutines run (a
// bounded wait: callers assert only that something did not happen yet,
// and check later that it does).
func blocked[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return false
	case <-time.After(20 * time.Millisecond):
		return true
	}
}

// loadInTurn is load, once key has enlisted in b's open round: the keys
// loaded one after another take their turns in that order.
func loadInTurn(t *testing.T, ctx context.Context, b *Batch, key string) <-chan result {
	t.Helper()
	b.mu.Lock()
	n := 0
	if b.open != nil {
		n = len(b.open.keys)
	}
	b.mu.Unlock()
	ch := load(ctx, b, key)
	testkit.Eventually(t, 10*time.Second, key+" enlisted", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.open != nil && len(b.open.keys) > n
	})
	return ch
}

// A paced batch lets at most Pace flights be undecided at once: Expect
// waits until one decides, or until its context ends.
func TestPaceBoundsUndecidedFlights(t *testing.T) {
	b := newPaced(&calls{answer: found}, 2, nil)
	b.Expect(context.Background(), "a")
	b.Expect(context.Background(), "b")
	third := expect(context.Background(), b, "c")
	if !blocked(third) {
		t.Fatal("a third flight started while two were undecided (Pace 2)")
	}
	b.Decided("a")
	if err := <-third; err != nil {
		t.Fatalf("Expect after a flight decided: %v", err)
	}
	b.Decided("a") // twice gives back nothing more
	ctx, cancel := context.WithCancel(context.Background())
	fourth := expect(ctx, b, "d")
	if !blocked(fourth) {
		t.Fatal("a fourth flight started while b and c were undecided")
	}
	cancel()
	if err := <-fourth; err != context.Canceled {
		t.Fatalf("Expect whose context ended: %v, want context.Canceled", err)
	}
}

// A paced round hands its keys their results at most Pace at a time: the
// next key gets its turn once a flight that had one ends (Decided). A
// flight that left before its turn holds no room.
func TestPaceHandsOutTurns(t *testing.T) {
	b := newPaced(&calls{answer: found}, 2, nil)
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	for _, k := range keys {
		if err := b.Expect(context.Background(), k); err != nil {
			t.Fatal(err)
		}
		if k >= "k1" { // room for the next: k0 stays undecided until it loads
			b.Decided(k)
		}
	}
	gone, leave := context.WithCancel(context.Background())
	results := make([]<-chan result, len(keys))
	for i, k := range keys {
		ctx := context.Background()
		if k == "k1" {
			ctx = gone
		}
		results[i] = loadInTurn(t, ctx, b, k)
	}
	leave() // k1 leaves, enlisted, before the round is called
	if r := wait(t, results[1]); r.err != context.Canceled {
		t.Fatalf("k1: %v, want context.Canceled", r.err)
	}
	b.Started()
	for _, i := range []int{0, 2} {
		if r := wait(t, results[i]); string(r.v) != "v-"+keys[i] || r.err != nil {
			t.Fatalf("%s: %q %v", keys[i], r.v, r.err)
		}
	}
	if !blocked(results[3]) {
		t.Fatal("k3 got its result while k0 and k2 held the room (Pace 2)")
	}
	b.Decided("k0") // k0's flight ended: committed
	if r := wait(t, results[3]); string(r.v) != "v-k3" {
		t.Fatalf("k3: %q %v", r.v, r.err)
	}
	if !blocked(results[4]) {
		t.Fatal("k4 got its result while k2 and k3 held the room")
	}
	b.Decided("k2")
	if r := wait(t, results[4]); string(r.v) != "v-k4" {
		t.Fatalf("k4: %q %v", r.v, r.err)
	}
	b.Decided("k3")
	b.Decided("k4")
	if n := len(b.room); n != 0 {
		t.Fatalf("%d room held once every flight ended; want 0", n)
	}
}

// Once its Owner ends, a paced round hands out the rest of its turns
// without waiting for room: no loader is left waiting on a closed owner.
func TestPaceEndsWithTheOwner(t *testing.T) {
	owner, closing := context.WithCancel(context.Background())
	b := newPaced(&calls{answer: found}, 1, owner)
	var results []<-chan result
	for i := range 3 {
		k := fmt.Sprint("k", i)
		b.Expect(context.Background(), k)
		results = append(results, loadInTurn(t, context.Background(), b, k))
	}
	b.Started()
	wait(t, results[0])
	if !blocked(results[1]) {
		t.Fatal("k1 got its result while k0 held the room (Pace 1)")
	}
	closing()
	for i := 1; i < 3; i++ {
		if r := wait(t, results[i]); r.err != nil {
			t.Fatalf("k%d: %v", i, r.err)
		}
	}
}

// A call still running at Timeout is abandoned, even one that ignores its
// context: each of its keys fails with Cut's error.
func TestCallAbandonedAtTimeout(t *testing.T) {
	stuck := make(chan struct{})
	defer close(stuck)
	errCut := fmt.Errorf("load timed out")
	b := newBatch(&calls{answer: func([]string) (map[string][]byte, map[string]error, error) {
		<-stuck // ignores its context
		return nil, nil, nil
	}}, nil)
	b.cfg.Timeout, b.cfg.Cut = 10*time.Millisecond, func() error { return errCut }
	b.Expect(context.Background(), "a")
	res := load(context.Background(), b, "a")
	b.Started()
	if r := wait(t, res); r.err != errCut {
		t.Fatalf("a: %v, want Cut's error", r.err)
	}
}
