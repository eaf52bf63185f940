package notify

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
)

// A channel moved by any path (here a listen without echo) leaves its echo
// name behind: the old node's queue unsubscribes that name, which the old
// node may still hold when a later waiter's fetch.lua runs there, so a
// later echo listen must not be handed it (newEcho). Found by a review.
func TestEchoNameNotReusedAfterAMove(t *testing.T) {
	n := echoNotifier(t)
	ctx := context.Background()
	defer n.Close()
	const ch = "q:n:{k}:k"
	s1 := n.Listen(ctx, ch, true)
	defer s1.Close()
	testkit.Eventually(t, 5*time.Second, "confirmed", func() bool { ok, _ := s1.Hears(0, false, s1.Mark()); return ok })
	n.moveConn()
	s2 := n.Listen(ctx, ch, false) // moves ch, echo kept
	defer s2.Close()
	s3 := n.Listen(ctx, ch, true)
	defer s3.Close()
	if s3.Echo() == s1.Echo() {
		t.Errorf("echo listen after a non-echo move got %q, the name the old node was told to unsubscribe", s3.Echo())
	}
}
