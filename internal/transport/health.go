package transport

import (
	"context"
	"errors"
	"time"
)

// What the Pipeline knows of its nodes' health, for its users (the
// Cache's Stats and Health, its rescues and replays), and the latest error
// Redis calls got, which the errors of silent batches name.

// BreakerOpen reports whether the breaker of any node is open or half-open.
func (p *Pipeline) BreakerOpen() bool {
	open := false
	p.nodes.Range(func(_, l any) bool {
		open = l.(*liveness).breaker.open()
		return !open
	})
	return open
}

// OpenFor is how long the nodes' breakers have been open, summed, the
// current openings included; it stops counting at Close.
func (p *Pipeline) OpenFor() time.Duration {
	var d time.Duration
	p.nodes.Range(func(_, l any) bool {
		d += l.(*liveness).breaker.openFor()
		return true
	})
	return d
}

// OpenErr returns the error of a node whose breaker keeps ops from it now
// (the first found): ErrCircuitOpen, wrapping why; nil when there is none.
func (p *Pipeline) OpenErr() error {
	var err error
	p.nodes.Range(func(_, l any) bool {
		b := l.(*liveness).breaker
		switch t := b.trip0(); {
		case t != nil:
			err = t.err()
		case b.down():
			if why := b.why(); why != nil {
				err = errorf("%w (%w)", ErrCircuitOpen, why)
			} else {
				err = ErrCircuitOpen
			}
		}
		return err == nil
	})
	return err
}

// Tripping reports whether any node is tripped now: when it is false,
// Tripped is nil for every key (one atomic load, and the caller need not
// build the key).
func (p *Pipeline) Tripping() bool { return p.trips.Load() != 0 }

// Tripped returns the error of an op of key while its node is tripped
// (down.go), so that the caller skips Redis without a round through the
// pipeline; nil otherwise (when no node is tripped, at the cost of one
// atomic load).
func (p *Pipeline) Tripped(key string) error {
	if p.trips.Load() == 0 {
		return nil
	}
	if t := p.liveness(p.NodeOf(key)).breaker.trip0(); t != nil {
		return t.err()
	}
	return nil
}

// HeardSince reports whether the node that serves key answered anything
// since t.
func (p *Pipeline) HeardSince(key string, t time.Time) bool {
	return p.liveness(p.NodeOf(key)).heard.Load() >= t.UnixNano()
}

// NodeOf is the address of the node that serves key: "" off a Cluster,
// where the pipeline's one node has no address.
func (p *Pipeline) NodeOf(key string) string {
	if p.cluster == nil {
		return ""
	}
	m, err := p.cluster.MasterForKey(context.Background(), key)
	if err != nil {
		return ""
	}
	return m.Options().Addr
}

// Batches is how many batches the pipeline's senders have sent, ever (not
// counting inline reads).
func (p *Pipeline) Batches() int64 { return p.batches.Load() }

// noteLate records the client's late answer to a batch given up on.
func (l *liveness) noteLate(err error) {
	if Says(err, RefusedDial) {
		l.refused.Store(&refusal{err: err, at: time.Now()})
	}
}

// note remembers err as the latest error from Redis.
func (h *health) note(err error) {
	if Says(err, CallerGone) || errors.Is(err, ErrCircuitOpen) || errors.Is(err, ErrRedisTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	h.lastMu.Lock()
	h.last = lastError{err: err, at: time.Now()}
	h.lastMu.Unlock()
}

// timeoutError is the error of a batch that got no reply in waited. It
// names the latest error Redis calls got (lastError): a refused connection
// explains a silence better than the silence itself.
func (h *health) timeoutError(waited time.Duration) error {
	if last := h.lastError(); last != nil {
		return errorf("%w (no reply %v after the call was sent; %w)", ErrRedisTimeout, waited, last)
	}
	return errorf("%w (no reply %v after the call was sent)", ErrRedisTimeout, waited)
}

// lastError describes the latest error Redis calls got, if one came in the
// last minute, or returns nil.
func (h *health) lastError() error {
	h.lastMu.Lock()
	last := h.last
	h.lastMu.Unlock()
	if last.err == nil || time.Since(last.at) > time.Minute {
		return nil
	}
	return errorf("latest error from Redis %v ago: %w", time.Since(last.at).Round(time.Millisecond), last.err)
}
