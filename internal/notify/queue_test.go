package notify

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
)

// counted counts a Notifier's commands and failures.
type counted struct{ subs, unsubs, errs atomic.Int64 }

func (c *counted) Subscribed()   { c.subs.Add(1) }
func (c *counted) Unsubscribed() { c.unsubs.Add(1) }
func (c *counted) RedisError()   { c.errs.Add(1) }

// Thousands of waiters that subscribe at once, in either pub/sub mode on a
// single server, are each confirmed and hear their notice, in a few
// commands rather than one each: their (un)subscriptions are queued and
// sent together. None fails.
func TestManySubscriptionsShareCommands(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	for _, mode := range []byte{wire.AnnounceSharded, wire.AnnouncePlain} {
		t.Run(string(mode), func(t *testing.T) {
			var st counted
			n := New(Config{Client: rdb, Stats: &st, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
				Mode: func(context.Context) (byte, error) { return mode, nil }})
			defer func() { n.Close().Wait() }()
			const waiters = 2000
			subs := make([]*Subscription, waiters)
			var wg sync.WaitGroup
			for i := range subs {
				wg.Go(func() { subs[i] = n.Subscribe(context.Background(), fmt.Sprintf("q:n:{%d}", i)) })
			}
			wg.Wait()
			for i, s := range subs {
				testkit.Eventually(t, 10*time.Second, fmt.Sprintf("waiter %d's subscription confirmed", i), func() bool {
					ok, _ := s.Hears(0, false, s.Mark())
					return ok
				})
			}
			publish := rdb.SPublish
			if mode == wire.AnnouncePlain {
				publish = rdb.Publish
			}
			for i := range subs {
				if err := publish(context.Background(), fmt.Sprintf("q:n:{%d}", i), "d").Err(); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range subs {
				select {
				case <-s.Notices():
				case <-time.After(10 * time.Second):
					t.Fatalf("waiter %d heard no notice", i)
				}
				s.Close()
			}
			testkit.Eventually(t, 10*time.Second, "the unsubscriptions sent", func() bool {
				return st.unsubs.Load() > 0 && n.queued() == 0
			})
			t.Logf("%d waiters: %d subscribe commands, %d unsubscribe commands", waiters, st.subs.Load(), st.unsubs.Load())
			if st.subs.Load() >= waiters/2 || st.unsubs.Load() >= waiters/2 || st.errs.Load() > 0 {
				t.Errorf("%d subscribe and %d unsubscribe commands for %d waiters, %d failed; want them shared, none failed",
					st.subs.Load(), st.unsubs.Load(), waiters, st.errs.Load())
			}
		})
	}
}

// queued is how many (un)subscriptions wait to be sent, on every
// connection.
func (n *Notifier) queued() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := 0
	for _, c := range n.conns {
		q += len(c.queue)
		if c.sending {
			q++
		}
	}
	return q
}

// A Notifier closed while its queue is being sent counts no Redis error
// and warns of nothing: the command failed because the connection closed.
func TestCloseWhileSendingIsNoError(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	for round := range 20 {
		var st counted
		n := New(Config{Client: rdb, Stats: &st, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
			Mode: func(context.Context) (byte, error) { return wire.AnnouncePlain, nil }})
		var wg sync.WaitGroup
		for i := range 300 {
			wg.Go(func() { n.Subscribe(context.Background(), fmt.Sprintf("c:%d:{%d}", round, i)) })
		}
		n.Close().Wait()
		wg.Wait()
		if e := st.errs.Load(); e > 0 {
			t.Fatalf("round %d: %d Redis errors counted for commands cut short by Close", round, e)
		}
	}
}

// A channel whose last waiter left lingers: waited on again meanwhile, it
// is listened on at once, without a command, and hears its notices; left
// alone, it is unsubscribed after channelLinger, in one command for all
// that left together; and Close drops lingering channels without a
// command.
func TestChannelsLinger(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	var st counted
	n := New(Config{Client: rdb, Stats: &st, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Mode: func(context.Context) (byte, error) { return wire.AnnounceSharded, nil }})
	subscribers := func(ch string) int64 { return rdb.PubSubShardNumSub(ctx, ch).Val()[ch] }

	for i := range 3 {
		n.Subscribe(ctx, fmt.Sprintf("l:n:{%d}", i)).Close()
	}
	subs := st.subs.Load()
	s := n.Subscribe(ctx, "l:n:{0}") // again, while it lingers
	if ok, _ := s.Hears(wire.AnnounceSharded, false, s.Mark()); !ok || st.subs.Load() != subs {
		t.Fatalf("a lingering channel waited on again: hears %v, %d subscribe commands more; want heard at once, none", ok, st.subs.Load()-subs)
	}
	rdb.SPublish(ctx, "l:n:{0}", "d")
	select {
	case <-s.Notices():
	case <-time.After(5 * time.Second):
		t.Fatal("a lingering channel waited on again heard no notice")
	}
	s.Close()
	if st.unsubs.Load() != 0 || subscribers("l:n:{1}") != 1 {
		t.Fatalf("%d unsubscribe commands, %d subscribers of a channel left; want none yet, still subscribed", st.unsubs.Load(), subscribers("l:n:{1}"))
	}
	testkit.Eventually(t, 5*time.Second, "the lingering channels unsubscribed", func() bool {
		return subscribers("l:n:{0}")+subscribers("l:n:{1}")+subscribers("l:n:{2}") == 0
	})
	if u := st.unsubs.Load(); u > 2 {
		t.Errorf("%d unsubscribe commands for 3 channels that left together and one later; want them shared", u)
	}

	n.Subscribe(ctx, "l:n:{9}").Close()
	unsubs := st.unsubs.Load()
	n.Close().Wait()
	if st.unsubs.Load() != unsubs {
		t.Fatalf("Close sent %d unsubscribe commands for a lingering channel; want none (the connection goes)", st.unsubs.Load()-unsubs)
	}
}
