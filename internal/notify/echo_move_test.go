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

// A waiter that listens with its echo on a channel whose slot has moved
// (the channel is still bound to the old node's connection, lingering or
// with listeners, and rebind/moveIfStale has not run yet) rebinds it in
// listen: an SUNSUBSCRIBE queued on the old connection and an SSUBSCRIBE
// on the new one. Both enqueues run with n.inline set, so each sets
// n.drain; the second overwrites the first, and nobody ever sends the old
// connection's queue: its sending flag stays set for good (every later
// (un)subscription on that node is queued and never sent) and the wg.Add
// made for it is never matched (Close's group never ends).
//
// The move is simulated on one server: the connection the channel is on
// is re-keyed to another address, as a Cluster master's would be.
func TestEchoListenOnMovedChannelSendsOldQueue(t *testing.T) {
	n := echoNotifier(t)
	ctx := context.Background()
	const ch = "q:n:{k}:k"
	s1 := n.Listen(ctx, ch, true)
	testkit.Eventually(t, 5*time.Second, "the first subscription confirmed", func() bool {
		ok, _ := s1.Hears(0, false, s1.Mark())
		return ok
	})
	old := n.moveConn() // the slot moves: the connection ch is bound to is now another node's

	s2 := n.Listen(ctx, ch, true) // binds ch (and its echo) to the slot's new node, leaving the old
	defer s1.Close()
	defer s2.Close()

	q := 0
	if !testkit.Within(3*time.Second, 20*time.Millisecond, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		q = len(old.queue)
		return !old.sending && q == 0
	}) {
		t.Errorf("the old node's connection: still sending, with %d (un)subscriptions queued, 3 s on; want its queue sent", q)
	}

	done := make(chan struct{})
	go func() { n.Close().Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Errorf("Close's wait group did not end in 5 s: a sender counted in it never ran")
	}
}

// echoNotifier returns a Notifier on a new server, sharded, with echoes
// under the prefix q.
func echoNotifier(t *testing.T) *Notifier {
	t.Helper()
	srv := redistest.Start(t)
	return New(Config{Client: srv.Client(), Stats: &counted{}, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Mode: func(context.Context) (byte, error) { return wire.AnnounceSharded, nil },
		Echo: wire.Echoes("q")})
}

// moveConn makes n's one connection another node's, as a Cluster slot's
// move would leave it, and returns it.
func (n *Notifier) moveConn() *pubsubConn {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.conns[""]
	delete(n.conns, "")
	old.addr = "old:6379"
	n.conns[old.addr] = old
	return old
}
