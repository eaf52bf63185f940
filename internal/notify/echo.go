package notify

import (
	"context"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/wire"
)

// The echo (docs/design.md, 3.3): a waiter that subscribes before it asks
// fetch.lua learns from the script whether it was listening in time; what
// it had proven by then is its Mark.

// A Mark is what s had proven when its waiter sent a fetch.lua
// (Subscription.Mark): Hears and ExpectEcho judge the script's WAIT by it,
// not by what came since, as a confirmation read after the script ran may
// be of a subscription the server ran after it.
type Mark struct {
	echoes    uint64        // messages read on its echo channel by then
	confirmed chan struct{} // its channel's confirmation, if read by then; nil if not
}

// Mark is what s has proven now, for a waiter about to send a fetch.lua;
// nothing for a nil s (a waiter not listening yet).
func (s *Subscription) Mark() Mark {
	if s == nil {
		return Mark{}
	}
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[s.channel]
	if cs == nil {
		return Mark{}
	}
	m := Mark{echoes: cs.echoed}
	select {
	case <-cs.confirmed:
		m.confirmed = cs.confirmed
	default:
	}
	return m
}

// setEcho names cs's echo channel anew (channel's): one that no
// subscription had before, so that, heard, it was subscribed by the
// command that named it, after every command queued before it on its
// connection (an UNSUBSCRIBE of the channel among them) had run. Called
// with n.mu held.
func (n *Notifier) setEcho(cs *channelSubs, channel string) {
	delete(n.echoes, cs.echo)
	n.echoGen++
	cs.echo = n.echo(channel) + ":" + strconv.FormatUint(n.echoGen, 36)
	n.echoes[cs.echo] = cs
}

// Echo is the echo channel of s (Listen), for fetch.lua to publish on;
// "" for none.
func (s *Subscription) Echo() string { return s.echo }

// InTime reports whether s was listening when the fetch.lua that told its
// waiter to WAIT ran: its echo was heard (heard, from the reply); the
// waiter then makes sure the echo is read too (ExpectEcho). If not, it
// waits for the server's confirmation (Confirm), after which the waiter
// fetches again: the notice may have gone out in between.
func (s *Subscription) InTime(ctx context.Context, heard bool) bool {
	if heard && s.echo != "" {
		return true
	}
	s.Confirm(ctx)
	return false
}

// ExpectEcho is for a waiter whose fetch.lua, sent at m, said its echo was
// heard (InTime). That count says a connection of this process had the
// subscription when the script ran; it does not say the connection lived
// to deliver what came after. One that dropped before its confirmation and
// the echo were read is dialled again and re-subscribed by go-redis, and
// that confirmation looks like the first: a notice published meanwhile is
// lost, and nothing says so. Once the echo is read, every later notice is
// read after it on the same connection, or the connection drops and its
// channels are confirmed a second time (a NoticeRecheck); a channel
// confirmed by m has that second confirmation to come, echo or not. So
// unless an echo is read after m within min(RedisTimeout, confirmWait), s
// gets a NoticeRecheck: its waiter fetches again.
func (s *Subscription) ExpectEcho(m Mark) {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.echoed(m) {
		return
	}
	time.AfterFunc(min(n.timeout, confirmWait), func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if !s.echoed(m) {
			s.tell(wire.Notice{Kind: wire.NoticeRecheck})
		}
	})
}

// echoed reports whether s needs no echo read after m (ExpectEcho): one
// was read, its channel was confirmed by m, it has no echo, or it was
// subscribed again elsewhere (bind, which rechecks). Called with n.mu held.
func (s *Subscription) echoed(m Mark) bool {
	cs := s.n.channels[s.channel]
	return cs == nil || s.echo == "" || cs.echo != s.echo || cs.echoed > m.echoes ||
		m.confirmed != nil && m.confirmed == cs.confirmed
}
