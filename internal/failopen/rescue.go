package failopen

import (
	"context"
	"time"
)

const (
	rescueMargin = 5 * time.Millisecond // left between the rescued load's expected end and the deadline
	rescueMin    = time.Millisecond     // Redis gets at least this long before a caller is rescued
)

// A Rescue is one caller's plan to fail open before its deadline.
type Rescue struct {
	At    time.Time // when; zero for never
	Began time.Time // when the call's Redis attempt began, or its silence is watched from (Again)
	Name  string    // the key's entry name, for its node (the caller's to set)

	deadline time.Time
	again    bool // Again was given
}

// From is when r's silence is watched from for a caller whose attempt
// began at began (Unix ns) rather than when r was planned: the later.
func (r *Rescue) From(began int64) time.Time {
	if t := time.Unix(0, began); t.After(r.Began) {
		return t
	}
	return r.Began
}

// Again gives r's caller a second chance, once, when at r's time the node
// had answered something since Began: perhaps a reply to a request sent
// before the attempt, read late on a starved machine, which says nothing of
// the node since. Silence is then watched from now, and the rescue is due
// half-way to the deadline: Again returns its Timer, or a nil channel when
// the chance was had, or the deadline is too near to leave Redis any time.
func (r *Rescue) Again() (<-chan time.Time, func() bool) {
	now := time.Now()
	left := r.deadline.Sub(now)
	if r.again || r.At.IsZero() || left <= 2*rescueMin {
		return nil, func() bool { return false }
	}
	r.again, r.Began, r.At = true, now, now.Add(left/2)
	return r.Timer()
}

// Plan returns the rescue of a call of n keys with deadline (none: ok
// false), beginning now: none when the deadline is no sooner than verdict
// (when corral itself would give up on a silent Redis), or too near to
// leave Redis any time; otherwise at the deadline less the longest of the
// keys' last loads (last(i), the i-th key's, when known) less a margin,
// or half-way to the deadline when any is unknown.
func Plan(deadline time.Time, ok bool, verdict time.Duration, n int, last func(i int) (time.Duration, bool)) Rescue {
	if n == 0 || !Needed(deadline, ok, verdict) {
		return Rescue{}
	}
	now := time.Now()
	left := deadline.Sub(now)
	at := deadline.Add(-left / 2)
	var longest time.Duration
	for i := range n {
		took, ok := last(i)
		if !ok {
			longest = -1
			break
		}
		longest = max(longest, took)
	}
	if longest >= 0 {
		at = deadline.Add(-longest - rescueMargin)
	}
	if earliest := now.Add(rescueMin); at.Before(earliest) {
		at = earliest
	}
	return Rescue{At: at, Began: now, deadline: deadline}
}

// Needed reports whether a call with deadline (ok false: none) may need
// a rescue: Plan's is not none, at least not for the next instant.
func Needed(deadline time.Time, ok bool, verdict time.Duration) bool {
	if !ok {
		return false
	}
	left := time.Until(deadline)
	return left < verdict && left > 2*rescueMin
}

// Timer returns a channel that fires at r's time, and its stop; nil (never)
// for no rescue.
func (r *Rescue) Timer() (<-chan time.Time, func() bool) {
	if r.At.IsZero() {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(time.Until(r.At))
	return t.C, t.Stop
}

// WaitAll waits, in turn, for the channel done gives each of calls (nil:
// nothing to wait for) until fire fires or ctx ends: it reports whether
// fire fired first (the calls still waiting are then to be rescued).
func WaitAll[C any](ctx context.Context, calls []C, fire <-chan time.Time, done func(c *C) <-chan struct{}) bool {
	for i := range calls {
		ch := done(&calls[i])
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-fire:
			return true
		}
	}
	return false
}

// JoinContext is the context of a wait, on behalf of calls whose context
// is calls, for a load under way that another call runs: it ends when
// calls does, unless closing (the Cache's) has ended by then, and then
// when loads does (the end of Close's grace), so that a load ending in
// the grace still answers the calls that wait for it. stop releases it.
func JoinContext(calls, closing, loads context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls))
	left := context.AfterFunc(calls, func() {
		if closing.Err() == nil { // the calls left, not Close
			cancel()
		}
	})
	ended := context.AfterFunc(loads, cancel)
	return ctx, func() { left(); ended(); cancel() }
}
