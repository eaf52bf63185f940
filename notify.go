package corral

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier multiplexes the notice channels of all waiting flights over
// shared pub/sub connections: one per Cache on a single Redis; on a Cluster
// with sharded pub/sub, where a subscription must be made on the node owning
// the channel's slot, one per slot tag (every channel with one tag has one
// slot). Connections are opened on
// first use. go-redis re-establishes a dropped connection and re-subscribes;
// notices published meanwhile are lost, and waiters fall back to their timers.
type notifier struct {
	rdb     redis.UniversalClient
	store   *store
	stats   *counters
	timeout time.Duration
	log     *slog.Logger

	mu       sync.Mutex // guards everything below, and the order of (un)subscribe commands
	conns    map[string]*pubsubConn
	channels map[string]*channelSubs
	closed   bool
	wg       sync.WaitGroup // dispatch goroutines
}

type pubsubConn struct {
	ps      *redis.PubSub
	sharded bool
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
	notices chan notice
}

// notice is a parsed completion notice (see commit.lua and release.lua).
type notice struct {
	kind    byte
	value   []byte // noticeValue
	message string // noticeFailed
}

const (
	noticeValue     = 'v' // committed; value inline
	noticeNotFound  = 'n' // committed a negative entry
	noticeCommitted = 'c' // committed; value too large to inline: fetch
	noticeFailed    = 'e' // the load failed; message follows
	noticeChanged   = 'd' // deleted, revoked or released: fetch
)

func parseNotice(payload string) notice {
	if payload == "" {
		return notice{kind: noticeChanged}
	}
	n := notice{kind: payload[0]}
	switch n.kind {
	case noticeValue:
		n.value = []byte(payload[1:])
	case noticeFailed:
		n.message = payload[1:]
	case noticeNotFound, noticeCommitted, noticeChanged:
	default:
		n.kind = noticeChanged // unknown: the safe reading is "fetch again"
	}
	return n
}

func newNotifier(rdb redis.UniversalClient, s *store, stats *counters, timeout time.Duration, log *slog.Logger) *notifier {
	return &notifier{
		rdb: rdb, store: s, stats: stats, timeout: timeout, log: log,
		conns: make(map[string]*pubsubConn), channels: make(map[string]*channelSubs),
	}
}

// subscribe starts listening on channel and waits until the server has
// confirmed the subscription (or RedisTimeout, or ctx, ends the wait; the
// waiter then relies on its timer). It always returns a subscription to close.
func (n *notifier) subscribe(ctx context.Context, channel string) *subscription {
	s := &subscription{n: n, channel: channel, notices: make(chan notice, 4)}
	if ctx.Err() != nil {
		return s // every caller has left: nothing to subscribe for
	}
	sharded, err := n.store.sharded(ctx)
	if err != nil {
		n.log.Warn("corral: cannot subscribe to notices; waiting on timers", "channel", channel, "err", err)
		return s
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return s
	}
	cs := n.channels[channel]
	if cs == nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.timeout)
		conn, err := n.subscribeOn(sctx, channel, sharded)
		cancel()
		cs = &channelSubs{conn: conn, confirmed: make(chan struct{}), listeners: make(map[*subscription]struct{})}
		n.channels[channel] = cs
		n.stats.subscribes.Add(1)
		if err != nil {
			n.stats.redisErrors.Add(1)
			n.log.Warn("corral: subscribe failed; waiting on timers until go-redis re-subscribes", "channel", channel, "err", err)
		}
	}
	cs.listeners[s] = struct{}{}
	confirmed := cs.confirmed
	n.mu.Unlock()

	timer := time.NewTimer(n.timeout)
	defer timer.Stop()
	select {
	case <-confirmed:
	case <-timer.C:
		n.log.Warn("corral: subscription not confirmed in time; waiting on timers", "channel", channel)
	case <-ctx.Done():
	}
	return s
}

// subscribeOn subscribes channel on its pub/sub connection, opening the
// connection with channel as its first subscription when there is none yet
// (so that go-redis connects a sharded subscription to the node owning the
// channel's slot, not to a random node). Called with n.mu held.
func (n *notifier) subscribeOn(ctx context.Context, channel string, sharded bool) (*pubsubConn, error) {
	shard := ""
	if _, cluster := n.rdb.(*redis.ClusterClient); cluster && sharded {
		shard, _ = hashTag(channel)
	}
	if c := n.conns[shard]; c != nil {
		if c.sharded {
			return c, c.ps.SSubscribe(ctx, channel)
		}
		return c, c.ps.Subscribe(ctx, channel)
	}
	var ps *redis.PubSub
	if sharded {
		ps = n.rdb.SSubscribe(ctx, channel)
	} else {
		ps = n.rdb.Subscribe(ctx, channel)
	}
	c := &pubsubConn{ps: ps, sharded: sharded}
	n.conns[shard] = c
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	n.wg.Add(1)
	go n.dispatch(ch)
	return c, nil
}

// dispatch delivers the messages of one pub/sub connection to the waiters
// listening on their channels, until the connection is closed.
func (n *notifier) dispatch(ch <-chan any) {
	defer n.wg.Done()
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" && m.Kind != "ssubscribe" {
				continue
			}
			n.mu.Lock()
			if cs := n.channels[m.Channel]; cs != nil {
				select {
				case <-cs.confirmed:
				default:
					close(cs.confirmed)
				}
			}
			n.mu.Unlock()
		case *redis.Message:
			nt := parseNotice(m.Payload)
			n.mu.Lock()
			if cs := n.channels[m.Channel]; cs != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	var err error
	if cs.conn.sharded {
		err = cs.conn.ps.SUnsubscribe(ctx, s.channel)
	} else {
		err = cs.conn.ps.Unsubscribe(ctx, s.channel)
	}
	n.stats.unsubscribes.Add(1)
	if err != nil {
		n.stats.redisErrors.Add(1)
	}
}

// close closes every pub/sub connection and waits for the dispatchers.
func (n *notifier) close() error {
	n.mu.Lock()
	n.closed = true
	conns := n.conns
	n.conns = nil
	n.mu.Unlock()
	for _, c := range conns {
		_ = c.ps.Close()
	}
	n.wg.Wait()
	return nil
}
