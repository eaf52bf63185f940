package notify

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
)

// ExpectEcho rechecks a waiter whose heard echo is not read within
// confirmWait: not when the echo comes in time, nor for a channel whose
// confirmation was read by the mark (a drop would bring a second one), nor
// for a subscription without an echo; and an echo read before the mark
// does not count for a later fetch.lua.
func TestExpectEcho(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client()
	ctx := context.Background()
	var st counted
	n := New(Config{Client: srv.Client(), Stats: &st, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Mode: func(context.Context) (byte, error) { return wire.AnnouncePlain, nil },
		Echo: wire.Echoes("q")})
	t.Cleanup(func() { n.Close() })
	s := n.Listen(ctx, "q:n:{k}:k", true)
	defer s.Close()
	testkit.Eventually(t, 5*time.Second, "the subscription confirmed", func() bool {
		ok, _ := s.Hears(0, false, s.Mark())
		return ok
	})
	unconfirmed := func() Mark { m := s.Mark(); m.confirmed = nil; return m } // as marked before the confirmation was read
	recheck := func(within time.Duration) bool {
		select {
		case nt := <-s.Notices():
			if nt.Kind != wire.NoticeRecheck {
				t.Fatalf("notice %+v; want a recheck", nt)
			}
			return true
		case <-time.After(within): // past confirmWait: the recheck would have come
			return false
		}
	}

	s.ExpectEcho(unconfirmed()) // the echo never comes
	if !recheck(5 * time.Second) {
		t.Fatal("no recheck 5 s after a heard echo that was never read")
	}
	m := unconfirmed()
	s.ExpectEcho(m)
	if heard := direct.Publish(ctx, s.Echo(), "").Val(); heard != 1 {
		t.Fatalf("echo heard by %d; want 1", heard)
	}
	if recheck(3 * confirmWait) {
		t.Fatal("a recheck though the echo was read")
	}
	testkit.Eventually(t, 5*time.Second, "the echo counted", func() bool { return s.Mark().echoes > m.echoes })
	s.ExpectEcho(unconfirmed()) // the echo read before this mark is not this fetch.lua's
	if !recheck(5 * time.Second) {
		t.Fatal("an echo read before the mark counted for a later fetch.lua")
	}
	s.ExpectEcho(s.Mark()) // confirmed by the mark
	if recheck(3 * confirmWait) {
		t.Fatal("a recheck for a channel confirmed before the script ran")
	}

	plain := n.Listen(ctx, "q:n:{j}:j", false)
	defer plain.Close()
	plain.ExpectEcho(Mark{})
	select {
	case <-plain.Notices():
		t.Fatal("a recheck for a subscription without an echo")
	case <-time.After(3 * confirmWait):
	}
}

// Hears judges a WAIT by what the subscription had proven when its
// fetch.lua was sent: a confirmation read since may be of a subscription
// the server ran after the script, and a notice sent in between is not
// heard. The waiter is told to fetch again (pending, closed already).
func TestHearsByTheMark(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var st counted
	n := New(Config{Client: srv.Client(), Stats: &st, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Mode: func(context.Context) (byte, error) { return wire.AnnouncePlain, nil }})
	t.Cleanup(func() { n.Close() })
	s := n.Listen(ctx, "q:n:{k}:k", false)
	defer s.Close()
	before := s.Mark()
	before.confirmed = nil // marked before the confirmation was read
	testkit.Eventually(t, 5*time.Second, "the subscription confirmed", func() bool {
		ok, _ := s.Hears(0, false, s.Mark())
		return ok
	})
	ok, pending := s.Hears(0, false, before)
	if ok || pending == nil {
		t.Fatalf("Hears by a mark taken before the confirmation = %v, %v; want false and the confirmation to fetch again on", ok, pending)
	}
	select {
	case <-pending:
	default:
		t.Fatal("pending is not closed: the confirmation came already")
	}
}
