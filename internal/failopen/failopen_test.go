package failopen

import (
	"context"
	"testing"
	"time"
)

// One load per key: a second claim joins the first until it ends; held
// answers instead of a new load once it has.
func TestGroup_OneLoadPerKey(t *testing.T) {
	var g Group[int]
	never := func() bool { return false }
	l, mine := g.Claim("k", never)
	if !mine || l == nil {
		t.Fatal("the first claim does not run the load")
	}
	if j, mine := g.Claim("k", never); mine || j != l {
		t.Fatal("a second claim does not join the load under way")
	}
	l.Result = 7
	l.End()
	if !l.Ended() || g.Get("k") != l {
		t.Fatal("an ended load is not kept")
	}
	if j, mine := g.Claim("k", func() bool { return true }); mine || j != nil {
		t.Fatal("held memory does not answer once the load ended")
	}
	g.Drop("k", &Load[int]{})
	if g.Get("k") != l {
		t.Fatal("dropping another load removed this one")
	}
	g.Drop("k", nil)
	if g.Get("k") != nil {
		t.Fatal("Drop(nil) kept the load")
	}
}

func TestPlan(t *testing.T) {
	unknown := func(int) (time.Duration, bool) { return 0, false }
	if r := Plan(time.Time{}, false, time.Second, 1, unknown); !r.At.IsZero() {
		t.Fatal("a call without a deadline is rescued")
	}
	if r := Plan(time.Now().Add(2*time.Second), true, time.Second, 1, unknown); !r.At.IsZero() {
		t.Fatal("a deadline later than the verdict is rescued")
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	r := Plan(deadline, true, time.Second, 1, unknown)
	if left := deadline.Sub(r.At); left < 90*time.Millisecond || left > 100*time.Millisecond {
		t.Fatalf("rescued %v before the deadline with no last load; want about half of 200ms", left)
	}
	known := func(int) (time.Duration, bool) { return 20 * time.Millisecond, true }
	r = Plan(deadline, true, time.Second, 2, known)
	if got := deadline.Sub(r.At); got != 20*time.Millisecond+rescueMargin {
		t.Fatalf("rescued %v before the deadline; want the last load and the margin", got)
	}
	ch, stop := (&Rescue{}).Timer()
	if ch != nil || stop() {
		t.Fatal("no rescue has a timer")
	}
}

// Again re-plans a rescue once: silence watched from now, due half-way to
// the deadline; a second Again, or one of a rescue never planned, gets no
// timer.
func TestRescueAgain(t *testing.T) {
	deadline := time.Now().Add(time.Second)
	r := Plan(deadline, true, 2*time.Second, 1, func(int) (time.Duration, bool) { return 0, false })
	before := time.Now()
	fire, stop := r.Again()
	defer stop()
	if fire == nil || r.Began.Before(before) {
		t.Fatalf("Again: timer %v, Began %v; want a timer, silence watched from %v on", fire, r.Began, before)
	}
	if half := r.Began.Add(deadline.Sub(r.Began) / 2); !r.At.Equal(half) {
		t.Errorf("Again: At %v; want half-way to the deadline, %v", r.At, half)
	}
	if fire, _ := r.Again(); fire != nil {
		t.Error("a second Again gave a timer; want one chance")
	}
	var never Rescue
	if fire, _ := never.Again(); fire != nil {
		t.Error("Again of a rescue never planned gave a timer")
	}
}

// A fail-open load's context carries its mark, which records whether the
// loader asked; other contexts carry none.
func TestLoadMark(t *testing.T) {
	if MarkOf(context.Background()) != nil {
		t.Fatal("a plain context is marked")
	}
	ctx, m := Marked(context.Background())
	if MarkOf(ctx) != m || m.Asked() {
		t.Fatal("the mark is not found, or asked before Ask")
	}
	MarkOf(ctx).Ask()
	if !m.Asked() {
		t.Fatal("Ask is not recorded")
	}
}

// JoinContext ends with the calls' context, except once the Cache is
// closing: then with the loads'.
func TestJoinContext(t *testing.T) {
	bg := context.Background()
	calls, leave := context.WithCancel(bg)
	ctx, stop := JoinContext(calls, bg, bg)
	leave()
	<-ctx.Done() // the calls left: the wait ends
	stop()

	calls, leave = context.WithCancel(bg)
	closing, closeCache := context.WithCancel(bg)
	loads, endLoads := context.WithCancel(bg)
	ctx, stop = JoinContext(calls, closing, loads)
	defer stop()
	closeCache()
	leave() // as Close cancels a flight
	select {
	case <-ctx.Done():
		t.Fatal("the wait ended with Close, before the loads did")
	default:
	}
	endLoads()
	<-ctx.Done()
}
