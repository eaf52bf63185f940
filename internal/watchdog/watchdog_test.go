package watchdog

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
)

// script is a Config's callbacks, replying to the renewals with replies in
// turn (then wire.Renewed), and recording what they were sent and told.
type script struct {
	mu      sync.Mutex // guards what follows
	replies []reply
	held    []int64 // each renewal's held deadline
	dead    []int64 // each renewal's deadline
	heard   []reply
}

type reply struct {
	res wire.Renewal
	err error
}

func (s *script) config(ttl time.Duration) Config {
	return Config{TTL: ttl, Timeout: time.Second, ServerNow: 1_000_000, At: time.Now(),
		Renew: func(held, deadline int64) (wire.Renewal, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.held, s.dead = append(s.held, held), append(s.dead, deadline)
			r := reply{res: wire.Renewed}
			if len(s.replies) > 0 {
				r, s.replies = s.replies[0], s.replies[1:]
			}
			return r.res, r.err
		},
		Heard: func(res wire.Renewal, err error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.heard = append(s.heard, reply{res, err})
		},
	}
}

// renewals returns how many renewals were sent.
func (s *script) renewals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

func TestServerAt(t *testing.T) {
	at := time.Now()
	if got := ServerAt(1000, at, at.Add(1500*time.Millisecond)); got != 2500 {
		t.Fatalf("ServerAt = %d, want 2500", got)
	}
}

// Halted before its first renewal, a Watchdog reports the grant: held, the
// grant's time, and its deadline a TTL after the grant on the server.
func TestHaltBeforeARenewal(t *testing.T) {
	var s script
	cfg := s.config(time.Hour)
	kept, renewed, ends := Start(cfg).Halt()
	if !kept || !renewed.Equal(cfg.At) || ends != cfg.ServerNow+time.Hour.Milliseconds() {
		t.Fatalf("Halt = %v, %v, %d; want true, the grant's time, %d", kept, renewed, ends, cfg.ServerNow+time.Hour.Milliseconds())
	}
	if s.renewals() != 0 {
		t.Fatal("a renewal was sent")
	}
}

// Renewals go on through failures and late replies, each told; a plain
// renewal is not. A renewal sends the deadline the last one that took set,
// and is dropped past the server's clock plus the Timeout.
func TestRenewsUntilHalt(t *testing.T) {
	failed := errors.New("no answer")
	s := script{replies: []reply{{res: wire.RenewRetaken}, {res: wire.RenewLate}, {res: wire.RenewLost, err: failed}}}
	cfg := s.config(30 * time.Millisecond)
	w := Start(cfg)
	testkit.Eventually(t, 10*time.Second, "five renewals", func() bool { return s.renewals() >= 5 })
	kept, renewed, ends := w.Halt()
	if !kept || !renewed.After(cfg.At) || ends <= cfg.ServerNow+30 {
		t.Fatalf("Halt = %v, %v, %d; want the lease kept, renewed since the grant", kept, renewed, ends)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.heard) != 3 || s.heard[0].res != wire.RenewRetaken || s.heard[1].res != wire.RenewLate || s.heard[2].err != failed {
		t.Fatalf("heard %v; want the retaken, late and failed replies, in turn", s.heard)
	}
	if s.held[0] != cfg.ServerNow+30 {
		t.Fatalf("the first renewal held %d, want the grant's deadline %d", s.held[0], cfg.ServerNow+30)
	}
	for i := range s.held {
		if s.dead[i] < cfg.ServerNow+time.Second.Milliseconds() {
			t.Fatalf("renewal %d's deadline %d is before the server's clock plus the Timeout", i, s.dead[i])
		}
	}
	if s.held[1] <= s.held[0] || s.held[2] != s.held[1] || s.held[3] != s.held[2] {
		t.Fatalf("held %v: a retaken lease's deadline moves, a late or failed renewal's does not", s.held)
	}
}

// A lost lease stops the Watchdog: told, and reported not kept, with the
// grant's time and deadline.
func TestStopsWhenLost(t *testing.T) {
	s := script{replies: []reply{{res: wire.RenewLost}}}
	cfg := s.config(30 * time.Millisecond)
	w := Start(cfg)
	<-w.done // stopped on its own
	kept, renewed, ends := w.Halt()
	if kept || !renewed.Equal(cfg.At) || ends != cfg.ServerNow+30 {
		t.Fatalf("Halt = %v, %v, %d; want false, the grant's time, %d", kept, renewed, ends, cfg.ServerNow+30)
	}
	if s.renewals() != 1 || len(s.heard) != 1 || s.heard[0].res != wire.RenewLost || s.heard[0].err != nil {
		t.Fatalf("%d renewals, heard %v; want one, lost", s.renewals(), s.heard)
	}
}
