// Package watchdog keeps a Cache's leases alive while their loads run. One
// Watchdog holds every lease of a Cache, from the moment its grant arrives
// (the reply of fetch.lua, read by the pipeline, before the flight that
// asked is even scheduled) until its holder halts it, and renews them all
// together: every TTL/4 it renews each lease granted, or last renewed, at
// least TTL/8 before, in one round (Config.Renew, which sends one script
// call per 200 leases, or one per lease on a Cluster: internal/renewal), so
// a batch of 50,000 leases costs a few round trips per renewal, not 50,000
// timers and goroutines. A lease's renewal is sent at most 3/8 of its TTL
// after its grant arrived or its last renewal was sent (what its expiry
// counts from, at the latest), which leaves the round 5/8 of the TTL to
// reach Redis.
//
// From the replies it learns whether each lease is still held, when it was
// last granted or renewed (local clock), and its deadline on the server's
// clock, before which it cannot have expired (ServerAt: the server's clock
// estimated, never ahead of it).
//
// It knows clocks and renew.lua's replies (internal/wire), nothing else:
// how a round is sent, and what a reply is counted, observed or logged as,
// are its Config's, the Cache's. It may not touch Redis or a Cache.
package watchdog

import (
	"sync"
	"time"

	"github.com/corralhq/corral/internal/wire"
)

// ServerAt estimates the server's clock (ms) at local time t, from
// serverNow, the server's clock when a reply was built, and at, the local
// clock when that reply arrived: then the estimate never runs ahead of the
// server, since serverNow was read before the reply reached us. Given
// instead the local clock when the request was sent, it never runs behind.
func ServerAt(serverNow int64, at, t time.Time) int64 {
	return serverNow + t.Sub(at).Milliseconds()
}

// Config is what a Watchdog is given: the leases' TTL, and the callbacks
// that send a round of renewals and tell of their replies.
type Config struct {
	TTL     time.Duration // the leases' TTL: each renewal is for TTL
	Timeout time.Duration // how long a renewal is waited for (RedisTimeout)

	// Renew sends a round of renewals, one per lease, and returns their
	// replies in the same order. Each round runs in a goroutine of its own.
	Renew func(rs []Renewal) []Reply
	// Heard is told of every reply but a plain wire.Renewed: the lease
	// found missing and taken again (wire.RenewRetaken: evicted), lost
	// (wire.RenewLost: it is renewed no more), a renewal dropped as late
	// (wire.RenewLate: it is tried again), or an error. May be nil.
	Heard func(l *Lease, r Reply)
}

// Renewal is one lease's renewal in a round: held is the lease's deadline
// (server ms), before which it cannot have expired; the server drops the
// renewal past deadline (server ms).
type Renewal struct {
	Lease          *Lease
	Held, Deadline int64
}

// Reply is what became of a Renewal.
type Reply struct {
	Res wire.Renewal
	Err error
}

// Lease is one lease the Watchdog holds.
type Lease struct {
	Key, Entry, Token string // the lease's key, its entry's, and the token that holds it
	Seen              int64  // the soft expiry of the entry it was taken over (0 for none)
	// Asked is when the fetch that granted it was sent (local clock),
	// before the server granted it: the renewals' deadlines count from
	// there, so that a grant read late (a process too busy to read its
	// replies for a while) does not make every renewal look late. The
	// zero time for the grant's arrival.
	Asked time.Time
	Of    any // the Cache's: whose lease it is, for Heard

	serverNow int64     // the server's clock (ms) at the grant
	at        time.Time // the local clock when the grant arrived
	// guarded by the Watchdog's mu:
	renewed time.Time     // when its last grant or renewal arrived (local clock): it expires at most TTL later
	from    time.Time     // when its grant arrived or its last renewal was sent: what its expiry counts from, at the latest
	ends    int64         // its deadline (server ms)
	lost    bool          // a renewal found it held by another, or revoked
	round   chan struct{} // closed when the round renewing it ends; nil outside one
}

// Watchdog renews the leases it holds every TTL/4, while it holds any.
type Watchdog struct {
	cfg    Config
	mu     sync.Mutex
	held   map[string]*Lease // by token
	run    bool              // the loop is running
	closed bool
	stop   chan struct{}
	rounds sync.WaitGroup // the loop and its rounds
}

// New returns a Watchdog; Close stops it.
func New(cfg Config) *Watchdog {
	return &Watchdog{cfg: cfg, held: map[string]*Lease{}, stop: make(chan struct{})}
}

// Hold holds l, whose grant the server made at serverNow (ms) and which
// arrived at at (local clock), until Halt: a lease granted again later (the
// same token) has its grant updated. Once the Watchdog is closed, a lease
// is held but not renewed.
func (w *Watchdog) Hold(l *Lease, serverNow int64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.held[l.Token]; old != nil && serverNow <= old.serverNow {
		return
	} else if old != nil {
		old.Asked, l = l.Asked, old
	}
	l.serverNow, l.at, l.renewed, l.from, l.ends, l.lost = serverNow, at, at, at, serverNow+w.cfg.TTL.Milliseconds(), false
	w.held[l.Token] = l
	if !w.run && !w.closed {
		w.run = true
		w.rounds.Add(1)
		go w.loop()
	}
}

// Halt stops renewing the lease of token and waits for a round renewing it
// now: no renewal of it is sent, or can land, after Halt returns. It
// reports whether the lease was still held at its last renewal, when that
// renewal's reply (or the grant) arrived: the lease expires at most TTL
// later; and its deadline (server ms), before which it cannot have expired.
// A lease it does not hold (halted already) reports false and zeros.
func (w *Watchdog) Halt(token string) (kept bool, renewed time.Time, ends int64) {
	w.mu.Lock()
	l := w.held[token]
	if l == nil {
		w.mu.Unlock()
		return false, time.Time{}, 0
	}
	delete(w.held, token)
	round := l.round
	w.mu.Unlock()
	if round != nil {
		<-round
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !l.lost, l.renewed, l.ends
}

// Close stops renewing. It returns the group of the loop and the rounds
// under way, for the caller to wait on as long as its own deadline allows
// (a round ends when its renewals are answered or fail).
func (w *Watchdog) Close() *sync.WaitGroup {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
	w.mu.Unlock()
	return &w.rounds
}

// loop starts a round every TTL/4, until no lease is held or Close.
func (w *Watchdog) loop() {
	defer w.rounds.Done()
	tick := time.NewTicker(max(w.cfg.TTL/4, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		if rs, done, ok := w.due(); !ok {
			return
		} else if len(rs) > 0 {
			w.rounds.Add(1)
			go w.round(rs, done)
		}
	}
}

// due returns the renewals of the leases due for one (their grant arrived,
// or their last renewal was sent, at least TTL/8 ago; not lost, not in a
// round), marking them as in a round that ends when done is closed. ok is false, and the loop is to end,
// when no lease is held.
func (w *Watchdog) due() (rs []Renewal, done chan struct{}, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.held) == 0 {
		w.run = false
		return nil, nil, false
	}
	now := time.Now()
	done = make(chan struct{})
	for _, l := range w.held {
		if l.lost || l.round != nil || now.Sub(l.from) < w.cfg.TTL/8 {
			continue
		}
		// A renewal that reaches the server after we stop waiting for it
		// must not extend the lease: renew.lua drops it past Deadline.
		l.round = done
		asked := l.at
		if !l.Asked.IsZero() {
			asked = l.Asked
		}
		rs = append(rs, Renewal{Lease: l, Held: l.ends, Deadline: ServerAt(l.serverNow, asked, now.Add(w.cfg.Timeout))})
	}
	return rs, done, true
}

// round sends rs and records their replies.
func (w *Watchdog) round(rs []Renewal, done chan struct{}) {
	defer w.rounds.Done()
	sent := time.Now()
	replies := w.cfg.Renew(rs)
	arrived := time.Now()
	w.mu.Lock()
	for i, r := range replies {
		l := rs[i].Lease
		switch {
		case r.Err == nil && (r.Res == wire.Renewed || r.Res == wire.RenewRetaken):
			// It counts from the server's clock as it was, at the earliest,
			// when the renewal was sent.
			l.renewed, l.from, l.ends = arrived, sent, ServerAt(l.serverNow, l.at, sent.Add(w.cfg.TTL))
		case r.Err == nil && r.Res == wire.RenewLost:
			l.lost = true
		}
		l.round = nil
	}
	w.mu.Unlock()
	close(done)
	for i, r := range replies {
		if (r.Err != nil || r.Res != wire.Renewed) && w.cfg.Heard != nil {
			w.cfg.Heard(rs[i].Lease, r)
		}
	}
}
