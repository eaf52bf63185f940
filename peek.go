package corral

import (
	"context"
	"strconv"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/flights"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/warn"
	"github.com/corralhq/corral/internal/wire"
)

// The hit path: a peek reads the entry's fields and the server's clock in
// one round trip (no script, no write), shared by concurrent callers, read
// inline when the client allows, and decides as fetch.lua would; only a
// missing, stale or invalidated entry, or one XFetch picks, goes on to a
// flight (docs/design.md, sections 3 and 3.1).

// peekCall is one peek, shared by the callers that ask for the key while it
// is under way: the peeks under way, one per key at most, are
// internal/flights' Group (Cache.peeks).
type peekCall struct {
	op   transport.Op  // the read (store.peekOp), sent by the call that began the peek
	args peekArgs      // op's
	c    *Cache        // the read's, set before others may join it
	key  string        // the read's, likewise
	done chan struct{} // closed once r and err are set, or once the flight it was handed to answers
	seq  near.Snap     // the near cache before the peek was sent (near cache on)
	sent int64         // near.Clock before the peek was sent
	r    peekReply
	err  error

	decoded near.Decoded // the entry's value decoded by a Fetch[T] caller (typed.go)

	// The sender's, for the flight a Fetch's peek hands its callers to
	// (handOff); first is nil for others' (Cache.batchPeeks).
	first  context.Context
	load   loader
	how    how
	handed flights.Handover[*flight]
}

// startPeek returns key's peek under way, with when the caller joined it
// (near.Clock: see forJoiner), or a new one with o, its read, for the
// caller to send (store.send, or the pipeline with others; joined 0).
// A Fetch's caller (first not nil, its load and h) counts as one of the
// peek's callers until it is answered or leaves (internal/flights' Leave).
func (c *Cache) startPeek(key string, first context.Context, load loader, h how) (pc *peekCall, o *transport.Op, joined int64) {
	g := &c.batchPeeks
	if first != nil {
		g = &c.peeks
	}
	pc, shared, _ := g.Join(key, func() (*peekCall, bool) {
		return &peekCall{c: c, key: key, done: make(chan struct{}), first: first, load: load, how: h}, true
	})
	if shared {
		return pc, nil, near.Clock()
	}
	if c.near != nil {
		pc.seq = c.near.Snapshot()
	}
	pc.sent = near.Clock()
	// The read is the Cache's (c.ctx), not a caller's: others may join it.
	c.store.peekOp(&pc.op, &pc.args, c.ctx, wire.EntryName(c.opts.Prefix, key))
	pc.op.Finisher = pc // no closure made per peek
	return pc, &pc.op, 0
}

// Finished keeps the reply of pc's read, and answers pc's callers.
func (pc *peekCall) Finished(res transport.Result) {
	r, err := pc.c.store.peekResult(res)
	if warn.IsWrongType(err) { // a key of another type at the entry's name: no entry (fetch.lua)
		pc.c.warn.Foreign(pc.key, pc.op.Key)
		r, err = peekReply{now: r.now}, nil
	}
	r.sent = pc.sent
	pc.r, pc.err = r, err
	if err == nil {
		pc.c.firstUse() // Redis answered
	}
	if pc.first == nil {
		pc.c.batchPeeks.Finish(pc.key, pc, pc.done)
		return
	}
	if err == nil && (!r.Found || r.now >= r.Soft) && pc.c.handOff(pc) {
		return // its callers now wait for the flight's answer
	}
	pc.c.peeks.Finish(pc.key, pc, pc.done) // answers pc's callers; key's next peek is a new one
}

// handOff starts key's flight for the callers of pc, a Fetch's peek that
// found no fresh entry: they wait for its answer where they waited for
// pc's, not woken to join it one by one, holding the CPU while its
// fetch.lua reply waits to be read (docs/design.md, section 3). false: pc
// answers them itself (they all left, pc was detached, a flight of the
// key is under way already, or the Cache closed).
func (c *Cache) handOff(pc *peekCall) bool {
	joined, ok := flights.Hand(&pc.handed, &c.peeks, pc, &c.flights, pc.key, func(callers int) (*flight, bool) {
		h := pc.how
		h.listen = callers > 1
		return c.newFlight(pc.first, pc.key, pc.load, h, nil, nil, pc.done)
	})
	c.stats.Joined.Add(uint64(joined))
	return ok
}

// forJoiner is pc's answer for a call that joined it at joined (near.Clock;
// 0 for the call that sent it): the same, unless the entry it read had gone
// stale by then, on the local clock counted from before the peek was sent
// (so never later than on the server's). A call that began after an
// entry's soft expiry is not served the entry as fresh because a read sent
// before it is still under way: a token with its own expiry (FetchEntry) is
// never served past it, however long the reply takes to reach the process.
// Such a call gets the reply as stale, for its flight to decide.
func (pc *peekCall) forJoiner(joined int64) *peekCall {
	if joined == 0 || pc == nil || pc.err != nil || !pc.r.Found || pc.r.now >= pc.r.Soft {
		return pc
	}
	if joined < near.Until(pc.sent, pc.r.Soft, pc.r.now) {
		return pc
	}
	stale := &peekCall{r: pc.r, seq: pc.seq, sent: pc.sent}
	stale.r.now = stale.r.Soft
	return stale
}

// awaitPeek waits for pc's reply, or returns ctx.Err() when ctx ends first.
func (c *Cache) awaitPeek(ctx context.Context, pc *peekCall) (*peekCall, error) {
	select {
	case <-pc.done:
		return pc, pc.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// peekCopy is what the near cache may keep of an answer from a peek.
type peekCopy struct {
	reply peekReply
	seq   near.Snap // the near cache before the peek was sent
}

// entry is the near cache's copy of the answer (val, err), of size bytes as
// stored: it expires when the entry's soft TTL ends, on the local clock
// (the server's remaining time, counted from before the peek was sent, so
// never later than the entry: a token is not served past its TTL).
func (p *peekCopy) entry(val any, err error, size int) *near.Entry {
	return &near.Entry{Val: val, Err: err, Soft: near.Until(p.reply.sent, p.reply.Soft, p.reply.now), Took: p.reply.Took, Size: uint32(size),
		Born: p.reply.Born, Tags: p.reply.Tags}
}

// servable reports whether the entry a peek found (r) answers a call with
// h, and as what: fresh, of the call's codec version and not one it skips,
// not picked for early refresh by its XFetch draw, and valid for the
// groups. Otherwise a flight must decide.
func (c *Cache) servable(r *peekReply, h *how) (outcome, bool) {
	if !r.Found || r.now >= r.Soft {
		return 0, false // missing or stale: fetch.lua decides
	}
	if h.version != "" && strconv.Itoa(r.Version) != h.version || h.skip == r.Soft {
		return 0, false // another codec version, or one that did not decode
	}
	if x := h.x; x > 0 && r.Took > 0 && float64(r.now)+r.Took*x >= float64(r.Soft) {
		return 0, false // picked for early refresh: fetch.lua takes the lease
	}
	if c.groups.Check(r.Born, r.Tags) != epochs.Valid {
		return 0, false // invalidated (groups.go), or records to read first: the flight decides
	}
	switch r.Flags.Kind {
	case wire.NotFound:
		return outNegative, true
	case wire.Failure:
		return outFailure, true
	}
	return outHit, true
}

// peekReply is an entry read without a script (peek): what it holds, as
// wire.Peeked reads it (its Payload dropped once decoded into payload), and
// the server's clock when it was read.
type peekReply struct {
	wire.Peeked
	payload []byte
	now     int64 // the server's clock, ms
	sent    int64 // near.Clock before the peek was sent (near cache on)
}

// peeked is what a peek found (e), with its payload decoded, and the
// server's clock when it was read (now).
func (s *store) peeked(e wire.Peeked, now int64) (peekReply, error) {
	r := peekReply{Peeked: e, now: now}
	r.Payload = "" // decoded into payload: not held twice
	if !e.Found {
		return r, nil
	}
	var err error
	if r.payload, err = s.decode(e.PayloadBytes(), r.Flags); err != nil {
		return r, errorf("peek: %w: %w", errBadEntry, err)
	}
	return r, nil
}
