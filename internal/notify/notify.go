// Package notify is how corral's waiters hear the end of another process's
// load: the pub/sub notices that commit.lua, release.lua and delete.lua
// publish on a key's channel (their format is in internal/wire). A Notifier
// multiplexes the channels of all waiting flights over shared pub/sub
// connections, opened on first use: one per Cache on a single Redis (or with
// plain pub/sub, which a Cluster broadcasts to every node); with sharded
// pub/sub on a Cluster, one per master node, since a shard channel must be
// subscribed on the node that owns its slot.
//
// go-redis re-establishes a dropped connection and re-subscribes its
// channels; notices published meanwhile are lost. The waiters on it
// re-check when a channel's confirmation comes a second time, or, for one
// whose echo was heard but never read, when that echo does not come
// (ExpectEcho, echo.go); otherwise they fall back to their timers. When a
// slot moves (resharding, failover), the owner's server drops its shard
// channels; the Notifier subscribes them again on the new owner, and each
// new wait checks that its channel lives on the slot's current master.
//
// A Notifier sends no command but pub/sub ones. What it needs of the cache
// it serves is in Config: how that cache publishes (its pub/sub mode), whom
// to tell when a Cluster node stops answering, and where to count.
//
// The pub/sub mode itself is here too (mode.go): a Mode, which Detect
// learns by publishing with a probe it is given (the cache's, through its
// one door, or Check's on its own client) and a Learner learns once. It
// may not send the probe itself, nor know where the probe's channel is.
package notify

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Config is what a Notifier needs from the cache it serves.
type Config struct {
	// Client is the cache's Redis client; the Notifier opens its pub/sub
	// connections with it (on a Cluster, with the client of each master).
	Client redis.UniversalClient
	// Mode returns how the cache publishes its notices: wire.AnnounceSharded
	// (SPUBLISH), wire.AnnouncePlain (PUBLISH) or wire.AnnounceNone (no
	// channel rights: nothing is subscribed). It is called on every
	// subscription, so it should be cheap once known.
	Mode func(ctx context.Context) (byte, error)
	// NodeFailed is called when a pub/sub connection to a Cluster node fails
	// its check (a PING): the node may have died, and its slots moved. The
	// cache is expected to reload the slot map and call RevalidateSoon.
	// It may be nil.
	NodeFailed func()
	// Stats counts the Notifier's commands and failures.
	Stats Stats
	// Timeout bounds each pub/sub command, and the wait for a subscription
	// (RedisTimeout).
	Timeout time.Duration
	Logger  *slog.Logger
	// Echo returns the echo channel of a notice channel: this process's,
	// in the channel's slot (Listen). nil: no echoes.
	Echo func(channel string) string
}

// Stats receives the Notifier's counts.
type Stats interface {
	Subscribed()   // a SUBSCRIBE or SSUBSCRIBE was sent
	Unsubscribed() // an UNSUBSCRIBE or SUNSUBSCRIBE was sent
	RedisError()   // a pub/sub command failed
}

// Notifier multiplexes the notice channels of all waiting flights over
// shared pub/sub connections (see the package doc).
type Notifier struct {
	rdb        redis.UniversalClient
	mode       func(ctx context.Context) (byte, error)
	echo       func(channel string) string
	nodeFailed func()
	stats      Stats
	timeout    time.Duration
	log        *slog.Logger
	warned     atomic.Int64 // when a subscribe failure was last logged as a warning (warn)

	mu           sync.Mutex // guards everything below, and orders (un)subscribe commands
	conns        map[string]*pubsubConn
	channels     map[string]*channelSubs
	closed       bool
	lingering    []lingering             // channels without listeners, still subscribed (linger.go), oldest first
	sweep        *time.Timer             // unsubscribes the lingering channels in their time; nil when none
	revalidating bool                    // a revalidate goroutine runs
	watching     bool                    // the watch goroutine runs
	inline       bool                    // enqueue leaves the sending to the caller (Listen): drain
	drain        *pubsubConn             // the connection whose queue the caller is to send (sendQueued)
	echoGen      uint64                  // echo channels named so far (setEcho)
	echoes       map[string]*channelSubs // the channel each echo channel is named for (setEcho)
	stop         chan struct{}           // closed by Close
	wg           sync.WaitGroup          // dispatch goroutines, re-subscriptions, revalidation, watch
}

// channelSubs is one subscribed notice channel and its local listeners.
type channelSubs struct {
	conn      *pubsubConn
	echo      string        // its echo channel, subscribed with it (Listen); "" for none
	echoed    uint64        // messages read on its echo channel (ExpectEcho)
	confirmed chan struct{} // closed when the server confirms the subscription
	listeners map[*Subscription]struct{}
	idleAt    time.Time // when its last listener left (it lingers: linger.go); zero while it has one
}

// Subscription is one waiter's interest in a notice channel.
type Subscription struct {
	n       *Notifier
	channel string
	notices chan wire.Notice
	mode    byte   // what it listens on: wire.AnnounceSharded or AnnouncePlain; 0 for nothing
	echo    string // its channel's echo channel (Listen); "" for none
}

// Notices delivers the notices published on s's channel, and a
// wire.NoticeRecheck when one may have been lost (its channel was
// subscribed again, or moved to another node). A waiter with notices
// queued may miss later ones: it has enough to act on.
func (s *Subscription) Notices() <-chan wire.Notice { return s.notices }

// confirmWait is how long a waiter waits for its subscription to be
// confirmed before it goes on re-checking on its own (and again once the
// confirmation comes): a server that never confirms (an ACL denying
// SUBSCRIBE) must not hold waiters up.
const confirmWait = 250 * time.Millisecond

// Hears reports whether s can hear the notice of a lease holder that
// announces as holder (wire.Announces; 0 when unknown), whose WAIT came
// from a fetch.lua sent at m: it is subscribed, the server had confirmed it
// by m on the connection it is on now (or the script's echo was heard:
// inTime, see InTime), and the holder publishes on the same kind of
// pub/sub. When it was not confirmed by m, pending is closed on its
// confirmation (closed already if that came since: fetch again).
func (s *Subscription) Hears(holder byte, inTime bool, m Mark) (ok bool, pending <-chan struct{}) {
	if s.mode == 0 || inTime {
		return s.mode != 0 && (holder == 0 || holder == s.mode), nil
	}
	confirmed := s.confirmation()
	if confirmed == nil {
		return false, nil
	}
	if m.confirmed != confirmed {
		return false, confirmed
	}
	return holder == 0 || holder == s.mode, nil
}

// New returns a Notifier for cfg. It opens nothing until the first
// subscription.
func New(cfg Config) *Notifier {
	return &Notifier{
		rdb: cfg.Client, mode: cfg.Mode, echo: cfg.Echo, nodeFailed: cfg.NodeFailed, stats: cfg.Stats, timeout: cfg.Timeout, log: cfg.Logger,
		conns: make(map[string]*pubsubConn), channels: make(map[string]*channelSubs), echoes: make(map[string]*channelSubs),
		stop: make(chan struct{}),
	}
}

// warn logs a subscribe failure as a warning once a minute, and at debug
// level otherwise: while Redis fails, every waiter may meet one.
func (n *Notifier) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := n.warned.Load()
	if now-last >= int64(time.Minute) && n.warned.CompareAndSwap(last, now) {
		n.log.Warn(msg, args...)
		return
	}
	n.log.Debug(msg, args...)
}

// errAttr is a warning's "err" attribute: err without the "corral: " that
// the warning's message begins with (its cause may be one of corral's
// errors, the pub/sub mode's, say).
func errAttr(err error) slog.Attr { return errprefix.Attr(errprefix.Corral, err) }

// Subscribe starts listening on channel and waits until the server has
// confirmed the subscription (or RedisTimeout, or ctx, ends the wait; the
// waiter then relies on its timer). It always returns a subscription to close.
func (n *Notifier) Subscribe(ctx context.Context, channel string) *Subscription {
	s := n.listen(ctx, channel, false)
	s.Confirm(ctx)
	return s
}

// Listen starts listening on channel and returns at once; with echo, on
// its echo channel too (Config.Echo): for a waiter that subscribes before
// it asks fetch.lua, which publishes on the echo channel when it says WAIT
// and tells how many heard it. One did when this process's subscription of
// the echo channel was on when the script ran, and so was that of channel:
// both go in one command, or channel's first, on the same connection (the
// server runs a connection's commands in order). The waiter then needs no
// second fetch.lua to catch a notice sent before it listened (InTime).
func (n *Notifier) Listen(ctx context.Context, channel string, echo bool) *Subscription {
	return n.listen(ctx, channel, echo && n.echo != nil)
}

// listen starts listening on channel, with its echo channel when echo.
func (n *Notifier) listen(ctx context.Context, channel string, echo bool) *Subscription {
	s := &Subscription{n: n, channel: channel, notices: make(chan wire.Notice, 4)}
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
		n.warn("corral: cannot subscribe to notices; re-checking on our own", "channel", channel, errAttr(err))
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
	// With an echo, the subscription is written by this goroutine, before
	// it returns to send fetch.lua (a goroutine started for it would run
	// behind the fetch on a busy process, and the echo go unheard), unless
	// commands queued before it are being sent.
	n.inline = echo
	cs := n.channels[channel]
	if cs == nil {
		cs = &channelSubs{listeners: make(map[*Subscription]struct{})}
		n.channels[channel] = cs
	}
	n.attach(sctx, cs, channel, at, echo)
	cs.listeners[s] = struct{}{}
	cs.idleAt = time.Time{}
	if echo {
		s.echo = cs.echo
	}
	c := n.drain
	n.inline, n.drain = false, nil
	n.mu.Unlock()
	if c != nil {
		n.sendQueued(c, true)
	}
	return s
}

// attach subscribes cs, channel's, on at's connection if it is not there
// (new, or its slot moved to another node), with a new echo channel when
// echo; one there already gets its echo behind its own subscription.
// Called with n.mu held.
func (n *Notifier) attach(ctx context.Context, cs *channelSubs, channel string, at node, echo bool) {
	switch {
	case cs.conn == nil || cs.conn.addr != at.addr:
		if cs.conn != nil && echo {
			n.unsubscribeOn(cs.conn, channel, cs.echo) // the old node's, under the old echo's name
			cs.conn = nil
		}
		if echo {
			n.setEcho(cs, channel)
		}
		n.bind(ctx, cs, channel, at)
	case echo && cs.echo == "":
		n.setEcho(cs, channel) // behind channel's own subscription, on its connection
		n.enqueue(cs.conn, false, cs.echo, "")
	}
}

// confirmation is closed once s is confirmed; nil if s's channel is not subscribed.
func (s *Subscription) confirmation() chan struct{} {
	s.n.mu.Lock()
	defer s.n.mu.Unlock()
	if cs := s.n.channels[s.channel]; cs != nil {
		return cs.confirmed
	}
	return nil
}

// Confirm waits until the server has confirmed s's subscription, or
// RedisTimeout, 250 ms (confirmWait) or ctx ends the wait.
func (s *Subscription) Confirm(ctx context.Context) {
	if s.mode == 0 || ctx.Err() != nil {
		return
	}
	n := s.n
	confirmed := s.confirmation()
	if confirmed == nil {
		return
	}
	timer := time.NewTimer(min(n.timeout, confirmWait))
	defer timer.Stop()
	select {
	case <-confirmed:
	case <-timer.C:
		n.log.Debug("corral: subscription not confirmed yet; re-checking on our own until it is", "channel", s.channel)
	case <-ctx.Done():
	}
}

// bind subscribes cs's channel on the connection to at, leaving the one it
// was on, if any, and tells its listeners to fetch again: a notice sent
// before the new subscription runs is not theirs to hear. Called with n.mu
// held.
func (n *Notifier) bind(ctx context.Context, cs *channelSubs, channel string, at node) {
	if cs.conn != nil {
		n.unsubscribeOn(cs.conn, channel, cs.echo)
		if cs.echo != "" {
			n.setEcho(cs, channel) // the old name may still be on at the old node (setEcho)
		}
	}
	cs.conn, cs.confirmed = n.subscribeOn(ctx, channel, cs.echo, at), make(chan struct{})
	n.recheck(cs) // its listeners waited on a subscription that is gone, or never was
}

// Refresh is for a waiter whose timer fired without a notice: the notice may
// have been lost with its subscription (a reconnect that go-redis could not
// re-subscribe, a master that died). It subscribes the channel again, where
// its slot lives now; on the same node that is a no-op for the server.
func (s *Subscription) Refresh(ctx context.Context) {
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
	n.enqueue(cs.conn, false, s.channel, "")
}

// Close stops listening. The channel of the last listener lingers, and is
// unsubscribed after channelLinger if nobody listens on it again.
func (s *Subscription) Close() {
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
	n.linger(cs, s.channel)
}

// Close closes every pub/sub connection. It returns the group of the
// dispatchers and re-subscriptions still ending, for the caller to wait on
// as long as its own deadline allows.
func (n *Notifier) Close() *sync.WaitGroup {
	n.mu.Lock()
	n.closed = true
	close(n.stop)
	if n.sweep != nil {
		n.sweep.Stop()
	}
	for _, c := range n.conns {
		n.closeConn(c)
	}
	n.mu.Unlock()
	return &n.wg
}
