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

// Echoed tells a waiter whether the echo its fetch.lua published has been
// read on its subscription's connection: not before the message comes (its
// channel is closed when it does, and the wait is bounded by confirmWait),
// and only for an echo read after its mark. A channel whose confirmation
// was read by the mark needs no echo (a drop would bring a second one), nor
// does a subscription without an echo.
func TestEchoedOnlyOnceRead(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client()
	ctx := context.Background()
	var st counted
	n := New(Config{Client: srv.Client(), Stats: &st, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Mode: func(context.Context) (byte, error) { return wire.AnnouncePlain, nil },
		Echo: wire.Echoes("q")})
	t.Cleanup(func() { n.Close() })
	const ch = "q:n:{k}:k"

	s := n.Listen(ctx, ch, true)
	defer s.Close()
	testkit.Eventually(t, 5*time.Second, "the subscription confirmed", func() bool {
		ok, _ := s.Hears(0, false, s.Mark())
		return ok
	})
	if ok, next, _ := s.Echoed(s.Mark()); !ok || next != nil {
		t.Fatalf("Echoed of a channel confirmed by the mark = %v, %v; want nothing to wait for", ok, next)
	}
	unconfirmed := func() Mark { m := s.Mark(); m.confirmed = nil; return m } // as marked before the confirmation was read
	mark := unconfirmed()
	ok, next, within := s.Echoed(mark)
	if ok || next == nil || within != confirmWait {
		t.Fatalf("Echoed before any echo = %v, %v, %v; want a channel to wait on, within %v", ok, next, within, confirmWait)
	}
	if heard := direct.Publish(ctx, s.Echo(), "").Val(); heard != 1 {
		t.Fatalf("echo heard by %d; want 1", heard)
	}
	select {
	case <-next:
	case <-time.After(5 * time.Second):
		t.Fatal("the echo was read, and the waiter's channel never closed")
	}
	if ok, _, _ := s.Echoed(mark); !ok {
		t.Fatal("Echoed after the echo was read = false")
	}
	if ok, next, _ := s.Echoed(unconfirmed()); ok || next == nil {
		t.Fatal("an echo read before the mark counts for a later fetch.lua")
	}

	plain := n.Listen(ctx, "q:n:{j}:j", false)
	defer plain.Close()
	if ok, next, _ := plain.Echoed(Mark{}); !ok || next != nil {
		t.Fatalf("Echoed of a subscription without an echo = %v, %v; want nothing to wait for", ok, next)
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
