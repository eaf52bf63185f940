package corral

import (
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ops sent again. A batch's outcome can say "not yet" rather than "failed":
// a live Redis's "not now" reply (it is loading, busy with a script, failing
// over, moving the key's slot), or a client that could not open a new
// connection in time, so that nothing was sent. Such ops are queued again,
// each kind within its own bound, rather than failed.

// batchFailed answers the ops of b, which the client failed with err:
// with err, unless the node is not silent and either nothing was sent,
// because the client did not see a new connection open in time, or the
// client's ReadTimeout ran out while it read the replies. A client starved
// of CPU sees a connection open late, and reads a large reply slowly, so
// neither is a verdict on Redis: the ops go again (after a read timeout,
// only those that just read: a script that ran may not run twice), and the
// monitor judges the node on their next batch (a node that drops
// connections is found silent by its probe).
func (p *pipeline) batchFailed(b *batch, g group, err error) {
	p.note(err)
	live := !b.live.silent(p.timeout)
	again, reread := live && dialTimedOut(err), live && readTimedOut(err)
	if !again && !reread && redisFailed(err) {
		p.failed(err) // on a Cluster: reload the slot map
	}
	switch {
	case refusedDial(err), authRefused(err):
		p.trip(b.node, b.live, err) // refused by the server: the node cannot be used
	case !again && !reread && redisFailed(err):
		p.lookSoon(b.node, b.live) // a reset or EOF: has the server gone away?
	}
	for _, o := range g.ops {
		if (again || reread && o.readOnly) && p.sendAgain(o) {
			continue
		}
		o.finish(opResult{err: err})
	}
}

// sendAgain queues o again after a short pause, unless its caller left or
// maxStalls RedisTimeouts have passed since it was first sent again. It
// reports whether it did.
func (p *pipeline) sendAgain(o *op) bool {
	return p.requeue(o, &o.resendBy, maxStalls*p.timeout, resendPause)
}

// requeue queues o again after pause (shortened to what is left of the
// window), unless its caller left or the window that *by marks has ended;
// *by is set to now + window at the first requeue. It reports whether it
// queued o.
func (p *pipeline) requeue(o *op, by *time.Time, window, pause time.Duration) bool {
	now := time.Now()
	if by.IsZero() {
		*by = now.Add(window)
	}
	if now.After(*by) || o.ctx.Err() != nil {
		return false
	}
	time.AfterFunc(min(pause, by.Sub(now)), func() {
		if !p.enqueue(o) {
			o.finish(opResult{err: ErrClosed})
		}
	})
	return true
}

// dialTimedOut reports whether err is the client's failure to open a
// connection in time (not a refusal: that is an answer).
func dialTimedOut(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && op.Timeout()
}

// readTimedOut reports whether err is the client's read deadline (its
// ReadTimeout) running out before a reply was read whole.
func readTimedOut(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read" && op.Timeout()
}

// retryLater queues o again after a short pause, if its RedisTimeout since
// the first "not now" reply has not run out. It reports whether it did.
func (p *pipeline) retryLater(o *op) bool {
	return p.requeue(o, &o.retryBy, p.timeout, 50*time.Millisecond)
}

// notNow reports whether err is a reply by which a live Redis says "not
// now": it is loading its data, busy with a script, failing over, or the
// slot of the key is moving. Such an op is tried again within RedisTimeout.
func notNow(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// isReplyError reports whether err is an error reply of Redis to one
// command (which leaves the others of a pipeline answered), rather than a
// failure of the exchange.
func isReplyError(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}
