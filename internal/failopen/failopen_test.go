package failopen

import (
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
