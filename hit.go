package corral

import (
	"context"
	"strconv"
	"time"

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
// server's clock (inline.go).

// peekCall is one peek, shared by the callers that ask for the key while it
// is under way.
type peekCall struct {
	done chan struct{} // closed once r and err are set
	seq  uint64        // the near cache's invalidations before the peek was sent
	r    peekReply
	err  error
}

// peek reads key's entry, joining a peek of it under way. It returns
// ctx.Err() when ctx ends first.
func (c *Cache) peek(ctx context.Context, key string) (*peekCall, error) {
	c.peekMu.Lock()
	pc := c.peeks[key]
	if pc == nil {
		pc = &peekCall{done: make(chan struct{})}
		if c.near != nil {
			pc.seq = c.near.snapshot()
		}
		c.peeks[key] = pc
		c.peekMu.Unlock()
		// The read is the Cache's (c.ctx), not this caller's: others may
		// join it. Read inline, it runs in this goroutine, so it ends by
		// this caller's deadline (then it goes on through the pipeline).
		by, _ := ctx.Deadline()
		c.store.peek(c.ctx, by, wire.EntryName(c.opts.Prefix, key), func(r peekReply, err error) {
			if c.near != nil {
				r.arrived = nearClock()
			}
			pc.r, pc.err = r, err
			c.peekMu.Lock()
			if c.peeks[key] == pc {
				delete(c.peeks, key)
			}
			c.peekMu.Unlock()
			close(pc.done)
		})
	} else {
		c.peekMu.Unlock()
	}
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
	seq   uint64 // the near cache's invalidations before the peek was sent
}

// entry is the near cache's copy of the answer (val, err), of size bytes as
// stored: it expires when the entry's soft TTL ends, on the local clock
// (the server's remaining time, counted from the reply's arrival).
func (p *peekCopy) entry(val any, err error, size int) *nearEntry {
	left := time.Duration(p.reply.soft-p.reply.now) * time.Millisecond
	return &nearEntry{val: val, err: err, soft: p.reply.arrived + int64(left), took: p.reply.took, size: uint32(size)}
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
