package corral

import (
	"context"
	"math"
	"time"

	"github.com/corralhq/corral/internal/flights"
	"github.com/corralhq/corral/internal/near"
)

// A Fetch (Cache.Fetch, FetchEntry, Fetch[T]) that finds its key's peek or
// flight under way, as most callers of a stampede do, waits in its own
// frame, not down in serve, whose frames, with the runtime's below a
// select (a sudog per case), made every such goroutine outgrow its first
// 2 KiB stack before it parked (docs/design.md, 3.3, "Stacks"). Keep
// those frames small, and joinedAnswer free of another wait.

// underWay is a call's place in key's flight (f) or peek (pc) under way,
// joined at joined (near.Clock), whose answer it waits for (done).
type underWay struct {
	ttl    time.Duration // the call's (Fetch, Fetch[T])
	noTTL  bool          // the call has none (FetchEntry)
	ended  bool          // done was closed when the wait ended
	first  bool          // f is the flight pc was handed over to, the call in its sender's place (handedTo): not a joiner
	drawn  bool          // x is the call's XFetch draw (how)
	x      float32       // rounded to a float32 (at most its largest) to fit beside the flags: Fetch's frame stays as small
	f      *flight
	pc     *peekCall
	joined int64
	done   <-chan struct{}
}

// joinUnderWay validates a call's arguments (err: validate's, of w.ttl
// unless w.noTTL, the call refused and counted), then joins key's
// flight, or else its peek, when one is under way and the call can wait
// for it as serve would (no near cache, no rescue to plan before its
// deadline, nothing keeping it from Redis). joined is false, nothing
// joined, when serve is to answer the call; true, and the caller waits for
// w.done or for ctx to end, in its own frame.
func (c *Cache) joinUnderWay(ctx context.Context, key string, nilLoader bool, w *underWay) (joined bool, err error) {
	var ttlErr error
	if !w.noTTL {
		ttlErr = refuse.TTL(w.ttl)
	}
	if err := c.validate(ctx, key, ttlErr, nilLoader); err != nil {
		return false, c.refused(ctx, key, err)
	}
	if c.near != nil || c.rescuable(ctx) {
		return false, nil
	}
	if f, ok := c.flights.JoinRunning(key); ok {
		w.f, w.joined, w.done = f, c.joined(), f.done
		return true, nil
	}
	if c.pending(key) || c.skipped(key) != nil {
		return false, nil
	}
	pc, ok := c.peeks.JoinRunning(key)
	if ok {
		w.pc, w.joined, w.done = pc, near.Clock(), pc.done
	}
	return ok, nil
}

// joinedFetch and joinedEntry are the answers of a Cache.Fetch and of a
// Cache.FetchEntry with load once they waited for w (joinedBytes); not
// inlined, as serveBytes (fetch.go).
//
//go:noinline
func (c *Cache) joinedFetch(ctx context.Context, key string, load func(context.Context) ([]byte, error), w *underWay) ([]byte, error) {
	if val, err, ok := c.answered(ctx, key, w); ok {
		return val, err
	}
	return c.joinedBytes(ctx, key, loader{ttl: w.ttl, bytes: load}, w)
}

//go:noinline
func (c *Cache) joinedEntry(ctx context.Context, key string, load func(context.Context) (Entry, error), w *underWay) ([]byte, error) {
	if val, err, ok := c.answered(ctx, key, w); ok {
		return val, err
	}
	return c.joinedBytes(ctx, key, loader{entry: load}, w)
}

// answered is the answer, counted, of a call whose wait for w ended with
// an answer it came in time for: its flight's, the one its peek was
// handed over to, or its peek's own (a fresh entry). ok is false
// otherwise, and joinedBytes answers. Almost every caller of a stampede
// runs this once woken, so it must go no deeper than the wait did, where
// joinedBytes made each of them outgrow its first stack (docs/design.md,
// 3.3, "Stacks"): its own frame is small, and the two it calls do not
// nest.
func (c *Cache) answered(ctx context.Context, key string, w *underWay) (val []byte, err error, ok bool) {
	switch {
	case !w.ended:
		return nil, nil, false
	case w.handed():
		return c.answeredByFlight(ctx, key, w)
	}
	return c.answeredByPeek(ctx, key, w)
}

// handed reports whether the call waited for a flight (w.f): one it
// joined, or the one its peek was handed over to, then set with w.first.
func (w *underWay) handed() bool {
	if w.f == nil {
		f, joined := handedTo(w.pc)
		if f == nil {
			return false
		}
		w.f, w.first = f, !joined
	}
	return true
}

// answeredByFlight takes w.f's answer as answerFor would.
func (c *Cache) answeredByFlight(ctx context.Context, key string, w *underWay) (val []byte, err error, ok bool) {
	val, err, out := w.f.answer.taken(!w.first, w.joined)
	if out == outLate {
		return nil, nil, false
	}
	c.count(ctx, key, out)
	return val, err, true
}

// answeredByPeek takes a fresh entry as afterPeek would. The XFetch draw
// it makes stays in w for joinedBytes.
func (c *Cache) answeredByPeek(ctx context.Context, key string, w *underWay) (val []byte, err error, ok bool) {
	if w.pc.err != nil {
		return nil, nil, false
	}
	w.x, w.drawn = float32(min(c.earlyFactor(), math.MaxFloat32)), true
	r := &w.pc.forJoiner(w.joined).r
	out, ok := c.servable(r, &how{x: float64(w.x), drawn: true})
	if !ok {
		return nil, nil, false
	}
	c.firstUse()
	c.count(ctx, key, out)
	val, err = entryAnswer(r.payload, r.Flags.Kind)
	return val, err, true
}

// joinedBytes is the answer of a call with l once it waited for w, as
// serve would have answered it, counted.
func (c *Cache) joinedBytes(ctx context.Context, key string, l loader, w *underWay) ([]byte, error) {
	a := c.joinedAnswer(ctx, key, l, how{x: float64(w.x), drawn: w.drawn}, w)
	c.count(ctx, key, a.out)
	return a.val, a.err
}

// joinedAnswer is the answer, not counted yet, of a call with l and h
// once it waited for w: the flight's, taken without another look at done
// when it was closed (a receive there would go deeper than the first
// stack), or what the peek leads to; asked again from Redis (askAgain)
// when the call joined too late for it (answerFor).
func (c *Cache) joinedAnswer(ctx context.Context, key string, l loader, h how, w *underWay) (a answer) {
	f, joined := w.f, !w.first
	if f == nil && w.ended {
		f, joined = handedTo(w.pc)
	}
	switch {
	case f != nil && w.ended:
		a = f.answerFor(joined, w.joined)
	case f != nil:
		a = c.await(ctx, f, joined, w.joined)
	default:
		a = c.afterJoinedPeek(ctx, key, l, h, w)
	}
	if a.out == outLate {
		a = c.askAgain(ctx, key, l, h)
	}
	return a
}

// askAgain is fromRedis for a joined call with l and h whose flight's
// answer came too late for it; not inlined, so that its frame is on no
// other caller's stack.
//
//go:noinline
func (c *Cache) askAgain(ctx context.Context, key string, l loader, h how) answer {
	h.draw(c)
	a, _ := c.fromRedis(ctx, key, l, h) // nothing to keep: no near cache
	return a
}

// handedTo is the flight pc, answered, handed its callers over to
// (handOff), nil when pc answered itself, and whether a caller of pc, not
// its sender (which callers mask: peeked), is one of pc's joiners there:
// false for the first to claim the place of a sender that left before the
// hand-over (Claim).
func handedTo(pc *peekCall) (f *flight, joined bool) {
	if f = pc.handed.To(); f != nil {
		return f, !pc.handed.Claim()
	}
	return nil, false
}

// afterJoinedPeek is fromRedis for a call with l and h that waited for
// w.pc: the flight's answer it was handed over to, or what the peek's
// reply leads to, as for peekFor's callers.
func (c *Cache) afterJoinedPeek(ctx context.Context, key string, l loader, h how, w *underWay) answer {
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
			return c.await(ctx, f, true, w.joined)
		}
		pc, perr = nil, ctx.Err()
	}
	h.draw(c)
	a, _ := c.afterPeekFor(ctx, key, l, h, pc, perr) // nothing to keep: no near cache
	return a
}
