package corral

import (
	"context"
	"strconv"
	"time"
	"unsafe"

	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
)

// The hit path. Most calls find a fresh entry, and need neither a lease nor
// a flight: a peek reads the entry's fields and the server's clock in one
// round trip (HMGET after TIME, pipelined; no script, no write), and decides
// on the server's clock as fetch.lua would. Only a missing or stale entry,
// or one that XFetch picks for early refresh, goes on to a flight and
// fetch.lua. Concurrent peeks of one key share one read. With a client
// that bounds its I/O by the context's deadline, a peek is read in the
// caller's goroutine, as a single HMGET decided on an estimate of the
// server's clock (internal/transport's inline.go).

// peekCall is one peek, shared by the callers that ask for the key while it
// is under way.
type peekCall struct {
	done chan struct{} // closed once r and err are set
	seq  nearSnap      // the near cache before the peek was sent
	sent int64         // nearClock before the peek was sent (near cache on)
	r    peekReply
	err  error
}

// startPeek returns key's peek under way, or a new one with o, its read,
// for the caller to send (store.send, or the pipeline with others).
func (c *Cache) startPeek(key string) (pc *peekCall, o *transport.Op) {
	c.peekMu.Lock()
	defer c.peekMu.Unlock()
	if pc = c.peeks[key]; pc != nil {
		return pc, nil
	}
	pc = &peekCall{done: make(chan struct{})}
	if c.near != nil {
		pc.seq, pc.sent = c.near.snapshot(), nearClock()
	}
	c.peeks[key] = pc
	// The read is the Cache's (c.ctx), not a caller's: others may join it.
	name := wire.EntryName(c.opts.Prefix, key)
	o = c.store.peekOp(c.ctx, name, func(r peekReply, err error) {
		if isWrongType(err) { // a key of another type at the entry's name: no entry (fetch.lua)
			c.foreignKey(key, name)
			r, err = peekReply{now: r.now}, nil
		}
		r.sent = pc.sent
		pc.r, pc.err = r, err
		c.peekMu.Lock()
		if c.peeks[key] == pc {
			delete(c.peeks, key)
		}
		c.peekMu.Unlock()
		close(pc.done)
	})
	return pc, o
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
	seq   nearSnap // the near cache before the peek was sent
}

// entry is the near cache's copy of the answer (val, err), of size bytes as
// stored: it expires when the entry's soft TTL ends, on the local clock
// (the server's remaining time, counted from before the peek was sent, so
// never later than the entry: a token is not served past its TTL).
func (p *peekCopy) entry(val any, err error, size int) *nearEntry {
	left := time.Duration(p.reply.soft-p.reply.now) * time.Millisecond
	return &nearEntry{val: val, err: err, soft: p.reply.sent + int64(left), took: p.reply.took, size: uint32(size)}
}

// fromPeek answers a call from a peek when the entry is fresh and XFetch
// does not pick it for an early refresh (x is the caller's XFetch draw):
// ok is false when a flight must decide.
func (c *Cache) fromPeek(r peekReply, h how) (a answer, ok bool) {
	x := h.x
	if !r.found || r.now >= r.soft {
		return answer{}, false // missing or stale: fetch.lua decides
	}
	if h.version != "" && strconv.Itoa(r.version) != h.version || h.skip == r.soft {
		return answer{}, false // another codec version, or one that did not decode
	}
	if x > 0 && r.took > 0 && float64(r.now)+r.took*x >= float64(r.soft) {
		return answer{}, false // picked for early refresh: fetch.lua takes the lease
	}
	out := outHit
	switch r.flags.Kind {
	case wire.NotFound:
		out = outNegative
	case wire.Failure:
		out = outFailure
	}
	val, err := entryAnswer(r.payload, r.flags.Kind)
	return answer{val: val, err: err, out: out, soft: r.soft}, true
}

// peekReply is an entry read without a script (peek): what it holds, and
// the server's clock when it was read.
type peekReply struct {
	found   bool // the entry has a payload
	payload []byte
	flags   wire.Flags
	soft    int64   // soft expiry, server ms
	took    float64 // the last load's duration, ms (XFetch)
	now     int64   // the server's clock, ms
	sent    int64   // nearClock before the peek was sent (near cache on)
	version int     // the codec version it was written with (0 when absent)
}

// peeked is what a peek found (e), with its payload decoded, and the
// server's clock when it was read (now).
func (s *store) peeked(e wire.Peeked, now int64) (peekReply, error) {
	r := peekReply{found: e.Found, flags: e.Flags, soft: e.Soft, took: e.Took, now: now, version: e.Version}
	if !e.Found {
		return r, nil
	}
	var err error
	if r.payload, err = s.decode(bytesOf(e.Payload), r.flags); err != nil {
		return r, errorf("peek: %w: %w", errBadEntry, err)
	}
	return r, nil
}

// bytesOf returns p's bytes without copying them: p is a bulk reply that
// go-redis read into a buffer of its own (which nobody else holds) and
// returned as a string, and the bytes go to callers, who must not modify
// them (see Fetch).
func bytesOf(p string) []byte {
	if len(p) == 0 {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(p), len(p))
}
