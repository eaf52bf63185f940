package notify

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// This file holds the life of a pub/sub connection: opened with its first
// channel, shared by the channels bound to its node, closed after
// idleLinger without any; and its messages, dispatched to the waiters.

// idleLinger is how long a pub/sub connection with no channels stays open
// for the next wait before it is closed.
const idleLinger = 30 * time.Second

// pubsubConn is one pub/sub connection.
type pubsubConn struct {
	addr    string // the node; "" off a Cluster or with plain pub/sub
	ps      *redis.PubSub
	sharded bool

	// guarded by Notifier.mu:
	channels int            // channels subscribed on it
	leaving  map[string]int // our SUNSUBSCRIBEs not yet confirmed, by channel
	idle     *time.Timer    // closes it after idleLinger without channels
	queue    []queued       // (un)subscriptions not sent yet, in order
	sending  bool           // a goroutine sends the queue (sendQueued)
}

// queued is one (un)subscription of a channel, waiting to be sent.
type queued struct {
	leave   bool // UNSUBSCRIBE or SUNSUBSCRIBE, rather than (S)SUBSCRIBE
	channel string
	echo    string // its echo channel, in the same command (Listen); "" for none
}

// maxChannels is how many channels one (un)subscribe command names at most.
// An SSUBSCRIBE or SUNSUBSCRIBE to a Cluster node names one: its channels
// must share a slot.
const maxChannels = 512

// subscribeOn subscribes channel, and echo with it unless "", on the
// connection to at, opening the connection when there is none yet. The
// connection is dialled in the background (openConn): a waiter that
// listens before it asks fetch.lua (Listen) is not held up by the dial.
// Called with n.mu held.
func (n *Notifier) subscribeOn(ctx context.Context, channel, echo string, at node) *pubsubConn {
	c := n.conns[at.addr]
	switch {
	case c == nil:
		c = n.openConn(ctx, at)
	case c.sharded != at.sharded && c.channels == 0 && len(c.queue) == 0 && len(c.leaving) == 0:
		c.sharded = at.sharded // opened before the mode was known (Open), and never used
	}
	c.channels++
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	n.enqueue(c, false, channel, echo)
	return c
}

// openConn opens the pub/sub connection to at, with no channel yet. It
// sends no command: go-redis dials it at once, in the background, to read
// from it. Called with n.mu held.
func (n *Notifier) openConn(ctx context.Context, at node) *pubsubConn {
	var ps *redis.PubSub
	if at.sharded {
		ps = at.client.SSubscribe(ctx)
	} else {
		ps = at.client.Subscribe(ctx)
	}
	c := &pubsubConn{addr: at.addr, ps: ps, sharded: at.sharded, leaving: make(map[string]int)}
	n.conns[at.addr] = c
	if at.addr != "" && !n.watching { // a Cluster node: watch that it stays up
		n.watching = true
		n.wg.Add(1)
		go n.watch()
	}
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	n.wg.Add(1)
	go n.dispatch(c, ch)
	return c
}

// Open opens the pub/sub connection of a Redis that is one server (not a
// Cluster's sharded pub/sub, whose connections are per node), if it is
// not open, so that a Cache's first waiters do not wait for its dial
// (Listen: their fetch.lua would otherwise often run before their
// subscription). It sends no command, and needs no pub/sub mode: on one
// server the connection is the same for both, and its first subscription
// picks the commands (subscribeOn). It closes after idleLinger without
// channels, as any.
func (n *Notifier) Open(ctx context.Context) {
	if _, cluster := n.rdb.(*redis.ClusterClient); cluster {
		return
	}
	at := node{client: n.rdb} // nodeFor's off a Cluster, but for the mode
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.conns[at.addr] != nil {
		return
	}
	c := n.openConn(ctx, at)
	c.channels = 1
	n.dropChannel(c) // idle from the start
}

// enqueue queues an (un)subscription of channel on c, to be sent with the
// others queued meanwhile: thousands of waiters that start at once (a big
// FetchMany) make a few commands, not one each, and no caller writes to
// the connection while holding n.mu. Called with n.mu held.
func (n *Notifier) enqueue(c *pubsubConn, leave bool, channel, echo string) {
	c.queue = append(c.queue, queued{leave, channel, echo})
	if !c.sending && !n.closed {
		c.sending = true
		n.wg.Add(1)
		if n.inline {
			if n.drain != nil && n.drain != c {
				go n.sendQueued(n.drain, false) // an earlier enqueue's (bind's leave of the old node): not the caller's to send
			}
			n.drain = c
			return
		}
		go n.sendQueued(c, false)
	}
}

// sendQueued sends c's queue, in order, a run of the same kind in one
// command of up to maxChannels channels (one, sharded on a Cluster), until the queue is empty, c is
// closed or the Notifier is. A command that fails is counted and logged:
// go-redis re-subscribes on reconnection, and the waiters re-check on
// their timers meanwhile. A waiter that sends its own subscription
// (inline, Listen) sends one command, and leaves the rest of the queue to
// a goroutine: its fetch.lua is not to wait behind others' subscriptions.
func (n *Notifier) sendQueued(c *pubsubConn, inline bool) {
	defer n.wg.Done()
	for sent := false; ; sent = true {
		n.mu.Lock()
		if len(c.queue) == 0 || n.closed || n.conns[c.addr] != c {
			c.queue, c.sending = nil, false
			n.mu.Unlock()
			return
		}
		if sent && inline {
			n.wg.Add(1)
			go n.sendQueued(c, false)
			n.mu.Unlock()
			return
		}
		leave, k, most := c.queue[0].leave, 1, maxChannels
		if c.sharded && c.addr != "" {
			most = 1
		}
		for k < len(c.queue) && k < most && c.queue[k].leave == leave {
			k++
		}
		channels := make([]string, 0, k)
		for _, q := range c.queue[:k] {
			if channels = append(channels, q.channel); q.echo != "" {
				channels = append(channels, q.echo) // one slot with channel's
			}
		}
		c.queue = c.queue[k:]
		n.mu.Unlock()
		if err := n.command(c, leave, channels); err != nil && !n.gone(c) {
			n.stats.RedisError()
			n.warn("corral: a pub/sub command failed; waiting on timers until go-redis re-subscribes", "channels", len(channels), errAttr(err))
		}
	}
}

// gone reports whether c was closed, or the Notifier was, since its queue
// was taken: a command it failed then is no Redis error.
func (n *Notifier) gone(c *pubsubConn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed || n.conns[c.addr] != c
}

// command sends one (un)subscribe command of channels on c, and counts it.
func (n *Notifier) command(c *pubsubConn, leave bool, channels []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	switch {
	case leave && c.sharded:
		n.stats.Unsubscribed()
		return c.ps.SUnsubscribe(ctx, channels...)
	case leave:
		n.stats.Unsubscribed()
		return c.ps.Unsubscribe(ctx, channels...)
	case c.sharded:
		n.stats.Subscribed()
		return c.ps.SSubscribe(ctx, channels...)
	default:
		n.stats.Subscribed()
		return c.ps.Subscribe(ctx, channels...)
	}
}

// unsubscribeOn drops channel, and its echo channel unless "", from c.
// Called with n.mu held.
func (n *Notifier) unsubscribeOn(c *pubsubConn, channel, echo string) {
	if c.sharded {
		c.leaving[channel]++
		if echo != "" {
			c.leaving[echo]++
		}
	}
	n.enqueue(c, true, channel, echo)
	n.dropChannel(c)
}

// dropChannel counts one channel fewer on c, and closes c after idleLinger
// if it stays without channels. Called with n.mu held.
func (n *Notifier) dropChannel(c *pubsubConn) {
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
func (n *Notifier) closeConn(c *pubsubConn) {
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
func (n *Notifier) dispatch(c *pubsubConn, ch <-chan any) {
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
					s.tell(nt)
				}
			} else if cs := n.echoes[m.Channel]; cs != nil && cs.conn == c {
				cs.echoed++ // ExpectEcho's
			}
			n.mu.Unlock()
		}
	}
}

// subscriptionEvent handles the server's word on a subscription: a
// confirmation, or the server dropping a channel it no longer owns (a slot
// that moved), which is subscribed again on the slot's new master.
func (n *Notifier) subscriptionEvent(c *pubsubConn, m *redis.Subscription) {
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
func (n *Notifier) recheck(cs *channelSubs) {
	for s := range cs.listeners {
		s.tell(wire.Notice{Kind: wire.NoticeRecheck})
	}
}

// tell queues nt for s's waiter, unless notices are queued already: it has
// enough to act on.
func (s *Subscription) tell(nt wire.Notice) {
	select {
	case s.notices <- nt:
	default:
	}
}
