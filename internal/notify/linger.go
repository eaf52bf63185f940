package notify

import "time"

// A channel whose last waiter leaves stays subscribed for channelLinger,
// as a lingering channel with no listener: a key that is waited on again
// meanwhile (a hot key's next miss, the next stampede) is listened on at
// once, with no command and no round trip for its confirmation, and the
// channels that do leave go in a few commands (sendQueued), not one each.
// Close drops lingering channels with their connections, sending nothing.
// At most maxLingering channels linger: past that the oldest leaves at
// once.
const (
	channelLinger = time.Second
	maxLingering  = 4096
)

// lingering is a channel that went without listeners at at.
type lingering struct {
	channel string
	at      time.Time
}

// linger keeps cs, whose last listener just left, subscribed for
// channelLinger. Called with n.mu held.
func (n *Notifier) linger(cs *channelSubs, channel string) {
	now := time.Now()
	cs.idleAt = now
	n.lingering = append(n.lingering, lingering{channel, now})
	n.sweepLocked(now)
	if len(n.lingering) > 0 && n.sweep == nil {
		n.sweep = time.AfterFunc(channelLinger, n.sweepNow)
	}
}

// sweepNow unsubscribes the channels that lingered their time, and waits
// for the next one's.
func (n *Notifier) sweepNow() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sweep = nil
	if n.closed {
		return
	}
	// Those due a little later go now too, in the same commands.
	now := time.Now().Add(channelLinger / 4)
	n.sweepLocked(now)
	if len(n.lingering) > 0 {
		n.sweep = time.AfterFunc(n.lingering[0].at.Add(channelLinger).Sub(now), n.sweepNow)
	}
}

// sweepLocked unsubscribes the lingering channels idle since channelLinger
// before now, and the oldest beyond maxLingering. An entry whose channel
// was listened on again since it was queued is dropped. Called with n.mu
// held.
func (n *Notifier) sweepLocked(now time.Time) {
	for len(n.lingering) > 0 {
		l := n.lingering[0]
		cs := n.channels[l.channel]
		if cs == nil || len(cs.listeners) > 0 || !cs.idleAt.Equal(l.at) {
			n.lingering = n.lingering[1:] // listened on again since, or gone
			continue
		}
		if now.Sub(l.at) < channelLinger && len(n.lingering) <= maxLingering {
			return
		}
		n.lingering = n.lingering[1:]
		delete(n.channels, l.channel)
		delete(n.echoes, cs.echo)
		if cs.conn != nil {
			n.unsubscribeOn(cs.conn, l.channel, cs.echo)
		}
	}
}
