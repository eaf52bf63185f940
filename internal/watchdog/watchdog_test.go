package watchdog

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script is a Config's callbacks, replying to each lease's renewals with
// its replies in turn (then wire.Renewed), and recording the rounds and
// what Heard was told.
type script struct {
	mu      sync.Mutex // guards what follows
	replies map[string][]Reply
	rounds  [][]Renewal
	heard   map[string][]Reply
	block   chan struct{} // when not nil, a round waits for it to close
}

func (s *script) config(ttl time.Duration) Config {
	return Config{TTL: ttl, Timeout: time.Second,
		Renew: func(rs []Renewal) []Reply {
			s.mu.Lock()
			s.rounds = append(s.rounds, rs)
			block := s.block
			out := make([]Reply, len(rs))
			for i, r := range rs {
				out[i] = Reply{Res: wire.Renewed}
				if q := s.replies[r.Lease.Token]; len(q) > 0 {
					out[i], s.replies[r.Lease.Token] = q[0], q[1:]
				}
			}
			s.mu.Unlock()
			if block != nil {
				<-block
			}
			return out
		},
		Heard: func(l *Lease, r Reply) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.heard == nil {
				s.heard = map[string][]Reply{}
			}
			s.heard[l.Token] = append(s.heard[l.Token], r)
		},
	}
}

// renewals returns the renewals sent of token, in order.
func (s *script) renewals(token string) []Renewal {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Renewal
	for _, round := range s.rounds {
		for _, r := range round {
			if r.Lease.Token == token {
				out = append(out, r)
			}
		}
	}
	return out
}

func TestServerAt(t *testing.T) {
	at := time.Now()
	if got := ServerAt(1000, at, at.Add(1500*time.Millisecond)); got != 2500 {
		t.Fatalf("ServerAt = %d, want 2500", got)
	}
}

// Halted before its first renewal, a lease reports its grant: held, the
// grant's arrival, and its deadline a TTL after the grant on the server. A
// token never held reports so.
func TestHaltBeforeARenewal(t *testing.T) {
	var s script
	w := New(s.config(time.Hour))
	defer func() { w.Close().Wait() }()
	at := time.Now()
	w.Hold(&Lease{Token: "a"}, 1_000_000, at)
	kept, renewed, ends := w.Halt("a")
	if !kept || !renewed.Equal(at) || ends != 1_000_000+time.Hour.Milliseconds() {
		t.Fatalf("Halt = %v, %v, %d; want true, the grant's time, %d", kept, renewed, ends, 1_000_000+time.Hour.Milliseconds())
	}
	if len(s.renewals("a")) != 0 {
		t.Fatal("a renewal was sent")
	}
	if kept, _, _ := w.Halt("a"); kept {
		t.Fatal("a lease halted twice was kept the second time")
	}
}

// Renewals go on through failures and late replies, each told; a plain
// renewal is not. A renewal sends the deadline the last one that took set,
// and is dropped past the server's clock plus the Timeout.
func TestRenewsUntilHalt(t *testing.T) {
	failed := errors.New("no answer")
	s := script{replies: map[string][]Reply{"a": {{Res: wire.RenewRetaken}, {Res: wire.RenewLate}, {Res: wire.RenewLost, Err: failed}}}}
	w := New(s.config(40 * time.Millisecond))
	defer func() { w.Close().Wait() }()
	const serverNow = 1_000_000
	at := time.Now()
	w.Hold(&Lease{Token: "a"}, serverNow, at)
	testkit.Eventually(t, 10*time.Second, "five renewals", func() bool { return len(s.renewals("a")) >= 5 })
	kept, renewed, ends := w.Halt("a")
	if !kept || !renewed.After(at) || ends <= serverNow+40 {
		t.Fatalf("Halt = %v, %v, %d; want the lease kept, renewed since the grant", kept, renewed, ends)
	}
	s.mu.Lock()
	heard := s.heard["a"]
	s.mu.Unlock()
	if len(heard) != 3 || heard[0].Res != wire.RenewRetaken || heard[1].Res != wire.RenewLate || heard[2].Err != failed {
		t.Fatalf("heard %v; want the retaken, late and failed replies, in turn", heard)
	}
	rs := s.renewals("a")
	if rs[0].Held != serverNow+40 {
		t.Fatalf("the first renewal held %d, want the grant's deadline %d", rs[0].Held, serverNow+40)
	}
	for i, r := range rs {
		if r.Deadline < serverNow+time.Second.Milliseconds() {
			t.Fatalf("renewal %d's deadline %d is before the server's clock plus the Timeout", i, r.Deadline)
		}
	}
	if rs[1].Held <= rs[0].Held || rs[2].Held != rs[1].Held || rs[3].Held != rs[2].Held {
		t.Fatalf("renewals %v: a retaken lease's deadline moves, a late or failed renewal's does not", rs)
	}
}

// A lost lease is renewed no more, and Halt reports it not kept, with the
// grant's time and deadline.
func TestStopsWhenLost(t *testing.T) {
	s := script{replies: map[string][]Reply{"a": {{Res: wire.RenewLost}}}}
	w := New(s.config(40 * time.Millisecond))
	defer func() { w.Close().Wait() }()
	at := time.Now()
	w.Hold(&Lease{Token: "a"}, 1000, at)
	w.Hold(&Lease{Token: "b"}, 1000, at)
	// b goes on being renewed: a had its chances.
	testkit.Eventually(t, 10*time.Second, "b renewed 3 times", func() bool { return len(s.renewals("b")) >= 3 })
	kept, renewed, ends := w.Halt("a")
	if kept || !renewed.Equal(at) || ends != 1040 {
		t.Fatalf("Halt = %v, %v, %d; want false, the grant's time, 1040", kept, renewed, ends)
	}
	if n := len(s.renewals("a")); n != 1 || len(s.heard["a"]) != 1 || s.heard["a"][0].Res != wire.RenewLost {
		t.Fatalf("%d renewals, heard %v; want one, lost", n, s.heard["a"])
	}
	w.Halt("b")
}

// Thousands of leases are renewed together: a round holds every lease due,
// and each lease is renewed again within 3/8 of its TTL.
func TestRenewsLeasesTogether(t *testing.T) {
	var s script
	ttl := 2 * time.Second // the first round (at about half of it) comes after all 5,000 are held, however busy the machine
	w := New(s.config(ttl))
	defer func() { w.Close().Wait() }()
	const n = 5000
	at := time.Now()
	for i := range n {
		w.Hold(&Lease{Token: fmt.Sprint(i)}, 1000, at)
	}
	testkit.Eventually(t, 10*time.Second, "every lease renewed", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		seen := 0
		for _, round := range s.rounds {
			seen += len(round)
		}
		return seen >= n
	})
	s.mu.Lock()
	first := len(s.rounds[0])
	s.mu.Unlock()
	if first != n {
		t.Fatalf("the first round renewed %d leases; want all %d, held at once", first, n)
	}
	for i := range n {
		if kept, _, _ := w.Halt(fmt.Sprint(i)); !kept {
			t.Fatalf("lease %d not kept", i)
		}
	}
}

// Halt waits for a round renewing the lease: no renewal of it can land
// after Halt returns.
func TestHaltWaitsForTheRound(t *testing.T) {
	s := script{block: make(chan struct{})}
	w := New(s.config(40 * time.Millisecond))
	defer func() { w.Close().Wait() }()
	w.Hold(&Lease{Token: "a"}, 1000, time.Now())
	testkit.Eventually(t, 10*time.Second, "a round", func() bool { return len(s.renewals("a")) == 1 })
	halted := make(chan struct{})
	go func() {
		w.Halt("a")
		close(halted)
	}()
	select {
	case <-halted:
		t.Fatal("Halt returned while a round renewing the lease was unanswered")
	case <-time.After(50 * time.Millisecond): // a window for a wrong Halt to return in
	}
	close(s.block)
	<-halted
}

// With nothing held the loop ends, and a new lease starts it again; once
// closed, nothing is renewed.
func TestLoopEndsWhenIdle(t *testing.T) {
	var s script
	w := New(s.config(20 * time.Millisecond))
	w.Hold(&Lease{Token: "a"}, 1000, time.Now())
	w.Halt("a")
	testkit.Eventually(t, 10*time.Second, "the loop ended", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.run
	})
	w.Hold(&Lease{Token: "b"}, 1000, time.Now())
	testkit.Eventually(t, 10*time.Second, "b renewed", func() bool { return len(s.renewals("b")) > 0 })
	w.Halt("b")
	w.Close().Wait()
	// Closed, it holds a lease (Halt reports its grant) but renews nothing.
	at := time.Now()
	w.Hold(&Lease{Token: "c"}, 1000, at)
	if kept, renewed, ends := w.Halt("c"); !kept || !renewed.Equal(at) || ends != 1020 || len(s.renewals("c")) != 0 {
		t.Fatalf("closed: Halt = %v, %v, %d after %d renewals; want the grant, none", kept, renewed, ends, len(s.renewals("c")))
	}
}

// A lease is due for renewal by when its last renewal was sent, what its
// expiry counts from, not by when that renewal's reply arrived: a slow
// round must not push the next one later.
func TestDueCountsFromTheSending(t *testing.T) {
	var s script
	ttl := time.Hour // no round of the loop's own in the test's time
	w := New(s.config(ttl))
	defer func() { w.Close().Wait() }()
	w.Hold(&Lease{Token: "a"}, 1000, time.Now())
	w.mu.Lock()
	l := w.held["a"]
	l.from, l.renewed = time.Now().Add(-ttl/8-time.Second), time.Now() // sent long ago, answered just now
	w.mu.Unlock()
	rs, done, _ := w.due()
	if len(rs) != 1 || rs[0].Lease.Token != "a" {
		t.Fatalf("due = %v; want the lease whose last renewal was sent over TTL/8 ago", rs)
	}
	close(done)
	w.mu.Lock()
	l.round, l.from = nil, time.Now() // sent just now
	w.mu.Unlock()
	if rs, _, _ := w.due(); len(rs) != 0 {
		t.Fatalf("due = %v; want none: the last renewal was just sent", rs)
	}
	w.Halt("a")
}

// A renewal's deadline counts from when the fetch that granted the lease
// was sent, not from when its grant was read: a process too busy to read
// its replies for a while (a FetchMany of thousands of keys on 2 cores)
// read grants seconds late, and every renewal then reached the server
// "late", was dropped, and the lease expired under its holder. The
// deadline is never behind the server's clock plus the wait (Timeout).
func TestDeadlineCountsFromTheAsking(t *testing.T) {
	var s script
	ttl := time.Hour // no round of the loop's own in the test's time
	w := New(s.config(ttl))
	defer func() { w.Close().Wait() }()
	arrived := time.Now()
	asked := arrived.Add(-3 * time.Second) // sent 3 s before its grant was read
	w.Hold(&Lease{Token: "a", Asked: asked}, 1000, arrived)
	w.mu.Lock()
	w.held["a"].from = arrived.Add(-ttl) // due
	w.mu.Unlock()
	rs, done, _ := w.due()
	close(done)
	if len(rs) != 1 {
		t.Fatalf("due = %v", rs)
	}
	// The server granted it at 1000, at most 3 s after asked: now (local)
	// it is at most 1000 + (now - asked), and the renewal may take Timeout.
	if min := int64(1000) + time.Since(asked).Milliseconds() + time.Second.Milliseconds() - 5; rs[0].Deadline < min {
		t.Fatalf("deadline %d; want at least %d: counted from the grant's arrival, not from the asking", rs[0].Deadline, min)
	}
	if rs[0].Held > 1000+ttl.Milliseconds() {
		t.Fatalf("held %d: the lease's own deadline must stay a bound from below (from its grant)", rs[0].Held)
	}
	w.Halt("a")
}

// A group's members are renewed as their group: one renewal a round for
// all of them, none of a member; each member's Halt reports the group's
// renewal and the lease kept; the group is renewed while any member is
// held, and no more once none is.
func TestGroupRenewedForItsMembers(t *testing.T) {
	var s script
	ttl := 40 * time.Millisecond
	w := New(s.config(ttl))
	defer func() { w.Close().Wait() }()
	now := time.Now()
	for i := range 1000 {
		w.Hold(&Lease{Token: fmt.Sprint("m", i), TTL: time.Hour, Group: &Lease{Key: "g", Entry: "g", Token: "batch"}}, 1000, now)
	}
	testkit.Eventually(t, 5*time.Second, "three renewals of the group", func() bool { return len(s.renewals("batch")) >= 3 })
	s.mu.Lock()
	for _, round := range s.rounds {
		if len(round) != 1 || round[0].Lease.Token != "batch" || round[0].Deadline != never {
			s.mu.Unlock()
			t.Fatalf("a round of %d renewals; want the group's alone, without a deadline", len(round))
		}
	}
	s.mu.Unlock()
	for i := range 999 {
		if kept, renewed, _ := w.Halt(fmt.Sprint("m", i)); !kept || !renewed.After(now) {
			t.Fatalf("member %d halted: kept %v, renewed %v; want kept, renewed since the grant", i, kept, renewed)
		}
	}
	n := len(s.renewals("batch"))
	testkit.Eventually(t, 5*time.Second, "the group renewed for its last member", func() bool { return len(s.renewals("batch")) > n+1 })
	w.Halt("m999")
	w.mu.Lock()
	left := len(w.groups)
	w.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d groups held after their last member's Halt", left)
	}
}

// A group's renewal is sent every round even while the last one is
// unanswered (a process too busy to read its replies), where a plain
// lease's waits for its round.
func TestGroupRenewalsOverlap(t *testing.T) {
	s := script{block: make(chan struct{})}
	ttl := 40 * time.Millisecond
	w := New(s.config(ttl))
	w.Hold(&Lease{Token: "m", TTL: time.Hour, Group: &Lease{Key: "g", Entry: "g", Token: "batch"}}, 1000, time.Now())
	w.Hold(&Lease{Token: "plain", Key: "l"}, 1000, time.Now())
	testkit.Eventually(t, 5*time.Second, "three renewals of the group, unanswered", func() bool { return len(s.renewals("batch")) >= 3 })
	if n := len(s.renewals("plain")); n != 1 {
		t.Errorf("%d renewals of a plain lease while its first is unanswered; want 1", n)
	}
	close(s.block)
	w.Halt("m")
	w.Halt("plain")
	w.Close().Wait()
}

// A member held for half its own TTL (a batch that outlasts what its PX
// allows for) is renewed on its own, by its TTL, beside its group; its
// Halt waits for that renewal's round, as a plain lease's does.
func TestMemberRenewedPastHalfItsTTL(t *testing.T) {
	var s script
	ttl := 40 * time.Millisecond
	w := New(s.config(ttl))
	defer func() { w.Close().Wait() }()
	w.Hold(&Lease{Token: "m", TTL: 4 * ttl, Group: &Lease{Key: "g", Entry: "g", Token: "batch"}}, 1000, time.Now())
	testkit.Eventually(t, 5*time.Second, "the member renewed on its own", func() bool { return len(s.renewals("m")) >= 2 })
	if n := len(s.renewals("batch")); n < 2 {
		t.Fatalf("%d renewals of the group; want it renewed too", n)
	}
	if r := s.renewals("m")[0]; r.Held != 0 {
		t.Fatalf("a member's renewal holds it until %d; want 0: found missing, it is lost, never taken again", r.Held)
	}
	if kept, _, _ := w.Halt("m"); !kept {
		t.Fatal("a member renewed on its own reported lost")
	}
}
