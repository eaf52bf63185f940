package corral

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/wire"
)

// A caller whose deadline comes before corral would give up on a silent
// Redis (about RedisTimeout after the call) is not left to time out: when
// its Redis attempt is still unanswered, and nothing at all has been heard
// from the key's node since the attempt began, it fails open (rescue) in
// time to run the loader before its deadline: at the deadline less the
// key's last load duration (known from a value this process held), less a
// margin; at half the time left when the duration is unknown. The load is
// the key's one fail-open load in this process (failsafe.go's opens), shared
// with the flight's own and with other rescued callers, and kept for
// fail-safe use, so a stampede of short deadlines costs one load per
// process, as fail-open does. A Redis that answers anything, however
// slowly, rescues nobody: slow is not down.

const (
	rescueMargin = 5 * time.Millisecond // left between the rescued load's expected end and the deadline
	rescueMin    = time.Millisecond     // Redis gets at least this long before a caller is rescued
)

// rescue is one caller's plan to fail open before its deadline.
type rescue struct {
	at    time.Time // when; zero for never
	began time.Time // when the call's Redis attempt began
	name  string    // the key's entry name, for its node
}

// planRescue returns the rescue of a call of key with ctx, beginning now:
// none without a deadline, or with one later than corral's own verdict on a
// silent Redis, or with fail-open off.
func (c *Cache) planRescue(ctx context.Context, key string) rescue {
	deadline, ok := ctx.Deadline()
	if !ok || c.opts.DisableFailOpen {
		return rescue{}
	}
	now := time.Now()
	left := deadline.Sub(now)
	if left >= c.opts.RedisTimeout+monitorTick || left <= 2*rescueMin {
		return rescue{}
	}
	at := deadline.Add(-left / 2)
	if took, ok := c.lastLoad(key); ok {
		at = deadline.Add(-took - rescueMargin)
	}
	if earliest := now.Add(rescueMin); at.Before(earliest) {
		at = earliest
	}
	return rescue{at: at, began: now, name: wire.EntryName(c.opts.Prefix, key)}
}

// timer returns a channel that fires at r's time, and its stop; nil (never)
// for no rescue.
func (r *rescue) timer() (<-chan time.Time, func() bool) {
	if r.at.IsZero() {
		return nil, func() bool { return false }
	}
	t := time.NewTimer(time.Until(r.at))
	return t.C, t.Stop
}

// due reports whether r's caller is to be rescued now: nothing heard from
// the key's node since its attempt began.
func (c *Cache) due(r *rescue) bool {
	return !c.store.pipe.heardSince(r.name, r.began)
}

// rescued answers a caller of key rescued (see the top of this file): from
// memory, or by the key's fail-open load.
func (c *Cache) rescued(ctx context.Context, key string, load loader) answer {
	if a, ok := c.failSafe(key); ok {
		return a
	}
	c.opts.Logger.Debug("corral: Redis has not answered, and the caller's deadline is near: calling the loader directly (fail-open)", "key", key)
	val, _, _, err, held := c.loadOpen(ctx, key, load, true)
	if held {
		return answer{val: val, err: err, out: outFailSafe}
	}
	return answer{val: val, err: err, out: outFailOpen}
}

// lastLoad returns how long key's latest load took, when this process
// holds a value of it that says so.
func (c *Cache) lastLoad(key string) (time.Duration, bool) {
	var took float64
	switch {
	case c.near != nil:
		e, _, ok := c.near.failSafe(key)
		if !ok {
			return 0, false
		}
		took = e.took
	case c.held != nil:
		h, ok := c.held.GetIfPresent(key)
		if !ok {
			return 0, false
		}
		took = h.took
	}
	if took <= 0 {
		return 0, false
	}
	return time.Duration(took * float64(time.Millisecond)), true
}

// heardSince reports whether the node that serves the Redis key name
// answered anything since t.
func (p *pipeline) heardSince(name string, t time.Time) bool {
	l := p.liveness(p.nodeOf(name))
	return l.heard.Load() >= t.UnixNano()
}
