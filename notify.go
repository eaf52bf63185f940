package corral

import (
	"github.com/corralhq/corral/internal/wire"

	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier multiplexes the notice channels of all waiting flights over
// shared pub/sub connections, opened on first use: one per Cache on a single
// Redis (or with plain pub/sub, which a Cluster broadcasts to every node);
// with sharded pub/sub on a Cluster, one per master node, since a shard
// channel must be subscribed on the node that owns its slot.
//
// go-redis re-establishes a dropped connection and re-subscribes its
// channels; notices published meanwhile are lost, and waiters fall back to
// their timers. When a slot moves (resharding, failover), the owner's
// server drops its shard channels; the notifier subscribes them again on
// the new owner, and each new wait checks that its channel lives on the
// slot's current master.
type notifier struct {
	rdb     redis.UniversalClient
	store   *store
	stats   *counters
	timeout time.Duration
	log     *slog.Logger

	mu           sync.Mutex // guards everything below, and orders (un)subscribe commands
	conns        map[string]*pubsubConn
	channels     map[string]*channelSubs
	closed       bool
	revalidating bool           // a revalidate goroutine runs
	watching     bool           // the watch goroutine runs
	stop         chan struct{}  // closed by close
	wg           sync.WaitGroup // dispatch goroutines, re-subscriptions, revalidation, watch
}

// idleLinger is how long a pub/sub connection with no channels stays open
// for the next wait before it is closed.
const idleLinger = 30 * time.Second

// pubsubConn is one pub/sub connection.
type pubsubConn struct {
	addr    string // the node; "" off a Cluster or with plain pub/sub
	ps      *redis.PubSub
	sharded bool

	// guarded by notifier.mu:
	channels int            // channels subscribed on it
	leaving  map[string]int // our SUNSUBSCRIBEs not yet confirmed, by channel
	idle     *time.Timer    // closes it after idleLinger without channels
}

// channelSubs is one subscribed notice channel and its local listeners.
type channelSubs struct {
	conn      *pubsubConn
	confirmed chan struct{} // closed when the server confirms the subscription
	listeners map[*subscription]struct{}
}

// subscription is one waiter's interest in a notice channel.
type subscription struct {
	n       *notifier
	channel string
	notices chan wire.Notice
	mode    byte // what it listens on: wire.AnnounceSharded or AnnouncePlain; 0 for nothing
}

// confirmWait is how long a waiter waits for its subscription to be
// confirmed before it goes on re-checking on its own (and again once the
// confirmation comes): a server that never confirms (an ACL denying
// SUBSCRIBE) must not hold waiters up.
const confirmWait = 250 * time.Millisecond

// hears reports whether s can hear the notice of a lease holder that
// announces as holder (wire.Announces; 0 when unknown): it is subscribed,
// the server confirmed it, and the holder publishes on the same kind of
// pub/sub. When the subscription is not confirmed yet, pending is closed on
// its confirmation.
func (s *subscription) hears(holder byte) (ok bool, pending <-chan struct{}) {
	if s.mode == 0 {
		return false, nil
	}
	var confirmed chan struct{}
	s.n.mu.Lock()
	if cs := s.n.channels[s.channel]; cs != nil {
		confirmed = cs.confirmed
	}
	s.n.mu.Unlock()
	if confirmed == nil {
		return false, nil
	}
	select {
	case <-confirmed:
	default:
		return false, confirmed
	}
	return holder == 0 || holder == s.mode, nil
}

func newNotifier(rdb redis.UniversalClient, s *store, stats *counters, timeout time.Duration, log *slog.Logger) *notifier {
	return &notifier{
		rdb: rdb, store: s, stats: stats, timeout: timeout, log: log,
		conns: make(map[string]*pubsubConn), channels: make(map[string]*channelSubs),
		stop: make(chan struct{}),
	}
}

// subscribe starts listening on channel and waits until the server has
// confirmed the subscription (or RedisTimeout, or ctx, ends the wait; the
// waiter then relies on its timer). It always returns a subscription to close.
func (n *notifier) subscribe(ctx context.Context, channel string) *subscription {
	s := &subscription{n: n, channel: channel, notices: make(chan wire.Notice, 4)}
	if ctx.Err() != nil {
		return s // every caller has left: nothing to subscribe for
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.timeout)
	defer cancel()
	at, err := n.nodeFor(sctx, channel)
	switch {
	case errors.Is(err, errNoChannelRights):
		return s // logged once, by the rights check
	case err != nil:
		n.log.Warn("corral: cannot subscribe to notices; re-checking on our own", "channel", channel, "err", err)
		return s
	}
	s.mode = wire.AnnouncePlain
	if at.sharded {
		s.mode = wire.AnnounceSharded
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return s
	}
	cs := n.channels[channel]
	if cs == nil {
		cs = &channelSubs{listeners: make(map[*subscription]struct{})}
		n.channels[channel] = cs
	}
	if cs.conn == nil || cs.conn.addr != at.addr {
		n.bind(sctx, cs, channel, at) // new, or its slot moved to another node
	}
	cs.listeners[s] = struct{}{}
	confirmed := cs.confirmed
	n.mu.Unlock()

	timer := time.NewTimer(min(n.timeout, confirmWait))
	defer timer.Stop()
	select {
	case <-confirmed:
	case <-timer.C:
		n.log.Debug("corral: subscription not confirmed yet; re-checking on our own until it is", "channel", channel)
	case <-ctx.Done():
	}
	return s
}

// bind subscribes cs's channel on the connection to at, leaving the one it
// was on, if any. Called with n.mu held.
func (n *notifier) bind(ctx context.Context, cs *channelSubs, channel string, at node) {
	if cs.conn != nil {
		n.unsubscribeOn(cs.conn, channel)
	}
	conn, err := n.subscribeOn(ctx, channel, at)
	cs.conn, cs.confirmed = conn, make(chan struct{})
	n.stats.subscribes.Add(1)
	if err != nil {
		n.stats.redisErrors.Add(1)
		n.log.Warn("corral: subscribe failed; waiting on timers until go-redis re-subscribes", "channel", channel, "err", err)
	}
}

// subscribeOn subscribes channel on the connection to at, opening the
// connection with channel as its first subscription when there is none yet
// (so that go-redis connects it to that node). Called with n.mu held.
func (n *notifier) subscribeOn(ctx context.Context, channel string, at node) (*pubsubConn, error) {
	if c := n.conns[at.addr]; c != nil {
		c.channels++
		if c.idle != nil {
			c.idle.Stop()
			c.idle = nil
		}
		return c, send(ctx, c, channel)
	}
	var ps *redis.PubSub
	if at.sharded {
		ps = at.client.SSubscribe(ctx, channel)
	} else {
		ps = at.client.Subscribe(ctx, channel)
	}
	c := &pubsubConn{addr: at.addr, ps: ps, sharded: at.sharded, channels: 1, leaving: make(map[string]int)}
	n.conns[at.addr] = c
	if at.addr != "" && !n.watching { // a Cluster node: watch that it stays up
		n.watching = true
		n.wg.Add(1)
		go n.watch()
	}
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	n.wg.Add(1)
	go n.dispatch(c, ch)
	return c, nil
}

// send sends c's (S)SUBSCRIBE of channel.
func send(ctx context.Context, c *pubsubConn, channel string) error {
	if c.sharded {
		return c.ps.SSubscribe(ctx, channel)
	}
	return c.ps.Subscribe(ctx, channel)
}

// unsubscribeOn drops channel from c. Called with n.mu held.
func (n *notifier) unsubscribeOn(c *pubsubConn, channel string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	var err error
	if c.sharded {
		c.leaving[channel]++
		err = c.ps.SUnsubscribe(ctx, channel)
	} else {
		err = c.ps.Unsubscribe(ctx, channel)
	}
	n.stats.unsubscribes.Add(1)
	if err != nil {
		n.stats.redisErrors.Add(1)
	}
	n.dropChannel(c)
}

// dropChannel counts one channel fewer on c, and closes c after idleLinger
// if it stays without channels. Called with n.mu held.
func (n *notifier) dropChannel(c *pubsubConn) {
	c.channels--
	if c.channels > 0 || n.conns[c.addr] != c {
		return
	}
	c.idle = time.AfterFunc(idleLinger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if c.channels == 0 && n.conns[c.addr] == c {
			n.closeConn(c)
		}
	})
}

// closeConn closes c. Called with n.mu held.
func (n *notifier) closeConn(c *pubsubConn) {
	if n.conns[c.addr] == c {
		delete(n.conns, c.addr)
	}
	if c.idle != nil {
		c.idle.Stop()
	}
	_ = c.ps.Close()
}

// dispatch delivers the messages of one pub/sub connection to the waiters
// listening on their channels, until the connection is closed.
func (n *notifier) dispatch(c *pubsubConn, ch <-chan any) {
	defer n.wg.Done()
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			n.subscriptionEvent(c, m)
		case *redis.Message:
			nt := wire.ParseNotice(m.Payload)
			n.mu.Lock()
			if cs := n.channels[m.Channel]; cs != nil && cs.conn == c {
				for s := range cs.listeners {
					select {
					case s.notices <- nt:
					default: // a waiter with notices queued has enough to act on
					}
				}
			}
			n.mu.Unlock()
		}
	}
}

// subscriptionEvent handles the server's word on a subscription: a
// confirmation, or the server dropping a channel it no longer owns (a slot
// that moved), which is subscribed again on the slot's new master.
func (n *notifier) subscriptionEvent(c *pubsubConn, m *redis.Subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m.Kind == "sunsubscribe" && c.leaving[m.Channel] > 0 {
		if c.leaving[m.Channel]--; c.leaving[m.Channel] == 0 {
			delete(c.leaving, m.Channel)
		}
		return // the confirmation of our own SUNSUBSCRIBE
	}
	cs := n.channels[m.Channel]
	if cs == nil || cs.conn != c {
		return // a channel we left, or moved ourselves
	}
	switch m.Kind {
	case "subscribe", "ssubscribe":
		select {
		case <-cs.confirmed:
			// Subscribed again: go-redis re-subscribed after the connection
			// dropped (a restart, an output buffer limit), or a waiter's
			// timer re-sent it. Notices published meanwhile are lost: the
			// waiters re-check now rather than on their timers.
			n.recheck(cs)
		default:
			close(cs.confirmed)
		}
	case "sunsubscribe":
		if n.closed {
			return
		}
		n.wg.Add(1)
		go n.rebind(m.Channel, c)
	}
}

// recheck tells cs's waiters to fetch again. Called with n.mu held.
func (n *notifier) recheck(cs *channelSubs) {
	for s := range cs.listeners {
		select {
		case s.notices <- wire.Notice{Kind: wire.NoticeRecheck}:
		default: // a waiter with notices queued has enough to act on
		}
	}
}

// refresh is for a waiter whose timer fired without a notice: the notice may
// have been lost with its subscription (a reconnect that go-redis could not
// re-subscribe, a master that died). It subscribes the channel again, where
// its slot lives now; on the same node that is a no-op for the server.
func (s *subscription) refresh(ctx context.Context) {
	n := s.n
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.timeout)
	defer cancel()
	at, err := n.nodeFor(sctx, s.channel)
	if err != nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[s.channel]
	if n.closed || cs == nil {
		return
	}
	if cs.conn == nil || cs.conn.addr != at.addr {
		n.bind(sctx, cs, s.channel, at) // its slot moved, or it never got subscribed
		return
	}
	n.stats.subscribes.Add(1)
	if err := send(sctx, cs.conn, s.channel); err != nil {
		n.stats.redisErrors.Add(1)
	}
}

// close stops listening. The last listener of a channel unsubscribes it.
func (s *subscription) close() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[s.channel]
	if cs == nil {
		return
	}
	if _, ok := cs.listeners[s]; !ok {
		return
	}
	delete(cs.listeners, s)
	if len(cs.listeners) > 0 || n.closed {
		return
	}
	delete(n.channels, s.channel)
	if cs.conn != nil {
		n.unsubscribeOn(cs.conn, s.channel)
	}
}

// close closes every pub/sub connection and waits for the dispatchers and
// re-subscriptions, until deadline at most.
func (n *notifier) close(deadline time.Time) {
	n.mu.Lock()
	n.closed = true
	close(n.stop)
	for _, c := range n.conns {
		n.closeConn(c)
	}
	n.mu.Unlock()
	waitUntil(&n.wg, deadline.Add(50*time.Millisecond))
}
