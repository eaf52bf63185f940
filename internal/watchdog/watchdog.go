// Package watchdog keeps a lease alive while the load it guards runs: it
// renews the lease every third of its TTL, and learns from the replies
// whether the lease is still held, when it was last granted or renewed
// (local clock), and its deadline on the server's clock, before which it
// cannot have expired (ServerAt: the server's clock estimated, never ahead
// of it).
//
// It knows clocks and renew.lua's replies (internal/wire), nothing else:
// how a renewal is sent, and what a reply is counted, observed or logged
// as, are its Config's, the Cache's. It may not touch Redis or a Cache.
package watchdog

import (
	"time"

	"github.com/corralhq/corral/internal/wire"
)

// ServerAt estimates the server's clock (ms) at local time t, from
// serverNow, the server's clock when a reply was built, and at, the local
// clock when that reply arrived. The estimate never runs ahead of the
// server: serverNow was read before the reply reached us.
func ServerAt(serverNow int64, at, t time.Time) int64 {
	return serverNow + t.Sub(at).Milliseconds()
}

// Config is what a Watchdog is given: the lease's grant and TTL, and the
// callbacks that send a renewal and tell of its reply.
type Config struct {
	TTL       time.Duration // the lease's TTL: renewed every TTL/3, each time for TTL
	Timeout   time.Duration // how long a renewal is waited for (RedisTimeout)
	ServerNow int64         // the server's clock (ms) when the lease was granted
	At        time.Time     // the local clock when that grant arrived

	// Renew sends a renewal of the lease, whose deadline (server ms) is
	// held, to be dropped by the server past deadline (server ms).
	Renew func(held, deadline int64) (wire.Renewal, error)
	// Heard is told of every reply but a plain wire.Renewed: the lease
	// found missing and taken again (wire.RenewRetaken: evicted), lost
	// (wire.RenewLost: the Watchdog then stops), a renewal dropped as late
	// (wire.RenewLate: it is tried again), or err when the renewal failed.
	// It runs on the Watchdog's goroutine.
	Heard func(res wire.Renewal, err error)
}

// A Watchdog renews a lease every TTL/3 while its load runs, until Halt.
type Watchdog struct {
	cfg  Config
	stop chan struct{}
	done chan struct{}
	// set by the watchdog goroutine; read after done is closed:
	lost    bool
	renewed time.Time // when the lease was last granted or renewed (local clock)
	// ends is the lease's deadline (server ms): it cannot expire before.
	// It counts from the server's clock as it was, at the earliest, when
	// the last renewal was sent, so a lease found missing before it was
	// evicted, not expired.
	ends int64
}

// Start starts a Watchdog over the lease cfg describes.
func Start(cfg Config) *Watchdog {
	w := &Watchdog{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{}), renewed: cfg.At,
		ends: cfg.ServerNow + cfg.TTL.Milliseconds()}
	go w.run()
	return w
}

// run renews the lease every TTL/3 until Halt, or until it is lost.
func (w *Watchdog) run() {
	defer close(w.done)
	tick := time.NewTicker(w.cfg.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		if !w.renew() {
			return
		}
	}
}

// renew sends one renewal and records its reply: false when the lease is
// lost.
func (w *Watchdog) renew() bool {
	// A renewal that reaches the server after we stop waiting for it
	// must not extend the lease: renew.lua drops it past this deadline.
	deadline, ends := w.serverDeadline(w.cfg.Timeout), w.serverDeadline(w.cfg.TTL)
	res, err := w.cfg.Renew(w.ends, deadline)
	switch {
	case err == nil && (res == wire.Renewed || res == wire.RenewRetaken):
		w.renewed, w.ends = time.Now(), ends
	case err == nil && res == wire.RenewLost:
		w.lost = true
	}
	if err != nil || res != wire.Renewed {
		w.cfg.Heard(res, err)
	}
	return !w.lost
}

// serverDeadline estimates the server's clock at local time now plus
// slack, never ahead of it (ServerAt).
func (w *Watchdog) serverDeadline(slack time.Duration) int64 {
	return ServerAt(w.cfg.ServerNow, w.cfg.At, time.Now().Add(slack))
}

// Halt stops the Watchdog and waits for it, including a renewal in flight:
// no renewal is sent, or can land, after it returns. It reports whether
// the lease was still held at the last renewal, and when its reply arrived:
// the lease expires at most TTL later; and the lease's deadline (server
// ms), before which it cannot have expired.
func (w *Watchdog) Halt() (kept bool, renewed time.Time, ends int64) {
	close(w.stop)
	<-w.done
	return !w.lost, w.renewed, w.ends
}
