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
// A FetchMany's leases are members of group leases (one per batch per
// Cluster slot, internal/scripts' lease.lua): a member lives while its
// group does, so the Watchdog renews the group, once for all its members,
// and never the members themselves. A group is held while any of its
// members is.
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
	// Group, for a member of a group lease, is that group lease (Key and
	// Entry its name, Token its token): renewed in the member's stead.
	// Hold shares one group among the members that name it.
	Group *Lease
	// TTL, when not 0, is the lease's own TTL instead of Config.TTL: a
	// member's PX, far longer than its group's. A member held for half of
	// it (a batch that outlasts what its PX allows for: a process starved
	// for seconds) is renewed on its own then, by TTL.
	TTL time.Duration

	members int       // a group's members held
	sent    time.Time // when a group's last renewal was sent (a group's rounds may overlap)

	serverNow int64     // the server's clock (ms) at the grant
	at        time.Time // the local clock when the grant arrived
	// guarded by the Watchdog's mu:
	renewed time.Time     // when its last grant or renewal arrived (local clock): it expires at most TTL later
	from    time.Time     // when its fetch or its last renewal was sent: what its expiry counts from, at the latest
	ends    int64         // its deadline (server ms)
	lost    bool          // a renewal found it held by another, or revoked
	round   chan struct{} // closed when the round renewing it ends; nil outside one
}

// Watchdog renews the leases it holds every TTL/4, while it holds any.
type Watchdog struct {
	cfg    Config
	mu     sync.Mutex
	held   map[string]*Lease // by token
	groups map[string]*Lease // the group leases of the members held, by name
	run    bool              // the loop is running
	closed bool
	stop   chan struct{}
	rounds sync.WaitGroup // the loop and its rounds
}

// New returns a Watchdog; Close stops it.
func New(cfg Config) *Watchdog {
	return &Watchdog{cfg: cfg, held: map[string]*Lease{}, groups: map[string]*Lease{}, stop: make(chan struct{})}
}

// Hold holds l, whose grant the server made at serverNow (ms) and which
// arrived at at (local clock), until Halt: a lease granted again later (the
// same token) has its grant updated. Once the Watchdog is closed, a lease
// is held but not renewed. A member of a group (l.Group) holds its group:
// the grant is the group's when the group is not held yet, or was found
// lost (the grant made it again: fetch.lua creates a missing group).
//
// A group's renewal takes it again whenever it is missing, however late:
// its members stand on their own leases (commit.lua), so a group made
// again only revives the members nobody took over meanwhile, which are
// still this process's loads.
func (w *Watchdog) Hold(l *Lease, serverNow int64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := l.Group; g != nil {
		if w.held[l.Token] == nil {
			if held := w.groups[g.Key]; held != nil {
				g = held
			} else {
				g.Asked, g.serverNow = l.Asked, 0
				w.groups[g.Key] = g
			}
			g.members++
			l.Group = g
			w.held[l.Token] = l
			w.grant(l, serverNow, at)
		} else {
			g = w.held[l.Token].Group
		}
		if g.serverNow == 0 || g.lost && serverNow > g.serverNow {
			w.grant(g, serverNow, at)
		}
	} else if old := w.held[l.Token]; old != nil && serverNow <= old.serverNow {
		return
	} else if old != nil {
		old.Asked, l = l.Asked, old
		w.grant(l, serverNow, at)
	} else {
		w.grant(l, serverNow, at)
		w.held[l.Token] = l
	}
	if !w.run && !w.closed {
		w.run = true
		w.rounds.Add(1)
		go w.loop()
	}
}

// grant sets what l's grant says: the server's clock (ms) when it was made,
// and the local clock when it arrived. Its expiry counts from when its
// fetch was sent (Asked), at the earliest: a grant read late is renewed as
// soon as one sent then would be.
func (w *Watchdog) grant(l *Lease, serverNow int64, at time.Time) {
	l.serverNow, l.at, l.renewed, l.from, l.ends, l.lost = serverNow, at, at, at, serverNow+w.ttl(l).Milliseconds(), false
	if !l.Asked.IsZero() && l.Asked.Before(at) {
		l.from = l.Asked
	}
}

// ttl is l's TTL: its own, or the Config's.
func (w *Watchdog) ttl(l *Lease) time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return w.cfg.TTL
}

// Halt stops renewing the lease of token and waits for a round renewing it
// now: no renewal of it is sent, or can land, after Halt returns. It
// reports whether the lease was still held at its last renewal, when that
// renewal's reply (or the grant) arrived: the lease expires at most TTL
// later; and its deadline (server ms), before which it cannot have expired.
// A lease it does not hold (halted already) reports false and zeros.
//
// A member of a group reports its group's renewal and deadline, and kept
// unless its own renewal found it lost: only its own lease says whether it
// still holds it (commit.lua checks), whatever became of the group. Its group is renewed on for the
// other members, and, once none is held, no more, without waiting for a
// round: a renewal landing later only makes the group live its TTL.
func (w *Watchdog) Halt(token string) (kept bool, renewed time.Time, ends int64) {
	w.mu.Lock()
	l := w.held[token]
	if l == nil {
		w.mu.Unlock()
		return false, time.Time{}, 0
	}
	delete(w.held, token)
	g := l.Group
	if g != nil {
		if g.members--; g.members == 0 {
			delete(w.groups, g.Key)
		}
	}
	round := l.round // a member's: its own renewal (a batch that outlasts half its TTL)
	w.mu.Unlock()
	if round != nil {
		<-round
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g != nil {
		return !l.lost, g.renewed, g.ends
	}
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
		if l.Group != nil && now.Sub(l.from) < w.ttl(l)/2 {
			continue // renewed as its group, and its own TTL lasts
		}
		rs = w.renewal(rs, l, now, done)
	}
	for _, g := range w.groups {
		// A group's renewal is sent even while an earlier one is
		// unanswered (a process too busy to read its replies for a while):
		// it is taken again however late (Hold), so it needs no deadline.
		if g.lost || now.Sub(g.from) < w.cfg.TTL/8 || now.Sub(g.sent) < w.cfg.TTL/8 {
			continue
		}
		g.sent = now
		rs = append(rs, Renewal{Lease: g, Held: never, Deadline: never})
	}
	return rs, done, true
}

// renewal appends l's renewal to rs if it is due for one, marking it as in
// the round that ends when done is closed.
func (w *Watchdog) renewal(rs []Renewal, l *Lease, now time.Time, done chan struct{}) []Renewal {
	if l.lost || l.round != nil || now.Sub(l.from) < w.cfg.TTL/8 {
		return rs
	}
	// A renewal that reaches the server after we stop waiting for it
	// must not extend the lease: renew.lua drops it past Deadline.
	l.round = done
	asked := l.at
	if !l.Asked.IsZero() {
		asked = l.Asked
	}
	held := l.ends
	if l.Group != nil {
		// A member found missing is lost, never taken again: a Delete's
		// marker over it lives only as long as its group might
		// (commit.lua, which does not take it for evicted either).
		held = 0
	}
	return append(rs, Renewal{Lease: l, Held: held, Deadline: ServerAt(l.serverNow, asked, now.Add(w.cfg.Timeout))})
}

// never is a deadline (server ms) no renewal reaches.
const never = 1 << 53

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
		case r.Err == nil && (r.Res == wire.Renewed || r.Res == wire.RenewRetaken) && sent.After(l.from):
			// It counts from the server's clock as it was, at the earliest,
			// when the renewal was sent (a group's rounds may overlap: the
			// latest sent counts).
			l.renewed, l.from, l.ends = arrived, sent, ServerAt(l.serverNow, l.at, sent.Add(w.ttl(l)))
		case r.Err == nil && r.Res == wire.RenewLost:
			l.lost = true
		}
		if l.round == done {
			l.round = nil
		}
	}
	w.mu.Unlock()
	close(done)
	for i, r := range replies {
		if (r.Err != nil || r.Res != wire.Renewed) && w.cfg.Heard != nil {
			w.cfg.Heard(rs[i].Lease, r)
		}
	}
}
