package transport

import "time"

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
func (p *Pipeline) batchFailed(b *batch, g group, err error) {
	p.note(err)
	live := !b.live.silent(p.timeout)
	c := Classify(err)
	again, reread := live && c&DialTimeout != 0, live && c&ReadTimeout != 0
	if !again && !reread && c&Unavailable != 0 {
		p.failed(err) // on a Cluster: reload the slot map
	}
	switch {
	case c&(RefusedDial|AuthRefused) != 0:
		p.trip(b.node, b.live, err) // refused by the server: the node cannot be used
	case !again && !reread && c&Unavailable != 0:
		p.lookSoon(b.node, b.live) // a reset or EOF: has the server gone away?
	}
	for _, o := range g.ops {
		if (again || reread && o.ReadOnly) && p.sendAgain(o) {
			continue
		}
		o.finish(Result{Err: err})
	}
}

// sendAgain queues o again after a short pause, unless its caller left or
// maxStalls RedisTimeouts have passed since it was first sent again. It
// reports whether it did.
func (p *Pipeline) sendAgain(o *Op) bool {
	return p.requeue(o, &o.resendBy, maxStalls*p.timeout, resendPause)
}

// requeue queues o again after pause (shortened to what is left of the
// window), unless its caller left or the window that *by marks has ended;
// *by is set to now + window at the first requeue. It reports whether it
// queued o.
func (p *Pipeline) requeue(o *Op, by *time.Time, window, pause time.Duration) bool {
	now := time.Now()
	if by.IsZero() {
		*by = now.Add(window)
	}
	if now.After(*by) || o.Ctx.Err() != nil {
		return false
	}
	time.AfterFunc(min(pause, by.Sub(now)), func() {
		if !p.enqueue(o) {
			o.finish(Result{Err: ErrClosed})
		}
	})
	return true
}

// retryLater queues o again after a short pause, if its RedisTimeout since
// the first "not now" reply has not run out. It reports whether it did.
func (p *Pipeline) retryLater(o *Op) bool {
	return p.requeue(o, &o.retryBy, p.timeout, 50*time.Millisecond)
}
