package corral

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/flights"
	"github.com/corralhq/corral/internal/near"
)

// A Fetch that finds its key's peek or flight under way, as most callers
// of a stampede do, waits for it in Fetch's own frame (joinUnderWay, then
// a select), not down in serve: the frames down to peekFor's wait, and the
// runtime's below a select (a sudog to allocate), would make each such
// goroutine outgrow its first stack (2 KiB) before it parks, a copy into a
// fresh 4 KiB each, which thousands of callers pay at once and the GC then
// counts (docs/design.md, 3.3). Keep Fetch's frame and joinUnderWay's
// small, and the answer's path (joinedAnswer) free of another wait.

// underWay is a call's place in key's flight (f) or peek (pc, joined at
// joined, near.Clock) under way, whose answer it waits for (done).
type underWay struct {
	ttl    time.Duration // the call's
	f      *flight
	pc     *peekCall
	joined int64
	done   <-chan struct{}
	ended  bool // done was closed when the wait ended
}

// joinUnderWay joins key's flight, or else its peek, when one is under
// way and the call can wait for it as serve would (valid arguments, no
// near cache, no rescue to plan before its deadline, nothing keeping it
// from Redis): false, having joined nothing, when serve is to answer the
// call. Fetch then waits for w.done, or for ctx to end.
func (c *Cache) joinUnderWay(ctx context.Context, key string, nilLoader bool, w *underWay) bool {
	if c.near != nil || c.validate(ctx, key, refuse.TTL(w.ttl), nilLoader) != nil || c.rescuable(ctx) {
		return false
	}
	if f, ok := c.flights.JoinRunning(key); ok {
		c.joined()
		w.f, w.done = f, f.done
		return true
	}
	if c.pending(key) || c.skipped(key) != nil {
		return false
	}
	pc, ok := c.peeks.JoinRunning(key)
	if ok {
		w.pc, w.joined, w.done = pc, near.Clock(), pc.done
	}
	return ok
}

// joinedAnswer is the answer of a call with load once Fetch waited for
// w: as serve would have answered it.
func (c *Cache) joinedAnswer(ctx context.Context, key string, load func(context.Context) ([]byte, error), w *underWay) ([]byte, error) {
	f, joined := w.f, true
	if f == nil && w.ended {
		f, joined = handedTo(w.pc)
	}
	var a answer
	switch {
	case f != nil && w.ended:
		a = f.answerFor(joined) // answered: no second look at done (its receive would go deeper than the first stack)
	case f != nil:
		a = c.await(ctx, f, joined)
	default:
		a = c.afterJoinedPeek(ctx, key, loader{ttl: w.ttl, bytes: load}, w)
	}
	c.count(ctx, key, a.out)
	return a.val, a.err
}

// handedTo is the flight pc, answered, handed its callers over to
// (handOff), and whether a caller of pc other than its sender joined it
// (as peeked says): nil when pc answered itself.
func handedTo(pc *peekCall) (f *flight, joined bool) {
	if f = pc.handed.To(); f != nil {
		return f, !pc.handed.Claim()
	}
	return nil, false
}

// afterJoinedPeek is fromRedis for a call that waited for w.pc: the
// flight's answer it was handed over to, or what the peek's reply leads
// to, as for peekFor's callers.
func (c *Cache) afterJoinedPeek(ctx context.Context, key string, load loader, w *underWay) answer {
	pc, perr := w.pc, error(nil)
	select {
	case <-pc.done:
		var a answer
		var answered bool
		if pc, a, answered, perr = c.peeked(ctx, pc, w.joined, true); answered {
			return a
		}
	default: // ctx ended first
		if f, handed := flights.Leave(&pc.handed, &c.peeks, pc, key, false); handed {
			return c.await(ctx, f, true)
		}
		pc, perr = nil, ctx.Err()
	}
	var h how
	h.draw(c)
	a, _ := c.afterPeekFor(ctx, key, load, h, pc, perr) // nothing to keep: no near cache
	return a
}
