package notify

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// This file holds what the Notifier does for a Redis Cluster, where a shard
// channel lives on the master that serves its slot and moves with it.

// errNoChannelRights: the ACL user may not publish on corral's channels, so
// it may not subscribe either; waiters re-check on their own.
var errNoChannelRights = errors.New("corral: no rights on corral's channels")

// node is where a channel is subscribed: its address and a client of it.
type node struct {
	addr    string
	client  redis.UniversalClient
	sharded bool
}

// nodeFor returns where channel must be subscribed now.
func (n *Notifier) nodeFor(ctx context.Context, channel string) (node, error) {
	mark, err := n.mode(ctx)
	switch {
	case err != nil:
		return node{}, err
	case mark == wire.AnnounceNone:
		return node{}, errNoChannelRights
	}
	sharded := mark == wire.AnnounceSharded
	cc, cluster := n.rdb.(*redis.ClusterClient)
	if !cluster || !sharded {
		return node{client: n.rdb, sharded: sharded}, nil
	}
	m, err := cc.MasterForKey(ctx, channel)
	if err != nil {
		return node{}, err
	}
	return node{addr: m.Options().Addr, client: m, sharded: true}, nil
}

// rebind subscribes channel again where its slot lives now, after its node
// dropped it.
func (n *Notifier) rebind(channel string, from *pubsubConn) {
	defer n.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
	defer cancel()
	at, err := n.newOwner(ctx, channel, from.addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[channel]
	if err != nil || n.closed || cs == nil || cs.conn != from {
		return
	}
	n.dropChannel(from) // the server already dropped it there
	cs.conn = nil
	n.bind(ctx, cs, channel, at)
}

// newOwner returns where channel lives now that its slot left the node at
// old: go-redis reloads the Cluster's slot map in the background, so this
// asks again, briefly, until the answer changes.
func (n *Notifier) newOwner(ctx context.Context, channel, old string) (node, error) {
	cc, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		return n.nodeFor(ctx, channel)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		cc.ReloadState(ctx)
		at, err := n.nodeFor(ctx, channel)
		if err == nil && at.addr != old {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return at, err // still there: subscribe where go-redis says
		case <-tick.C:
		}
	}
}

// RevalidateSoon checks, in the background and for a short while, that each
// subscribed channel lives on the master that serves its slot now, and moves
// those that do not, telling their waiters to fetch again (a notice may have
// been lost). It runs after a Redis call failed on a Cluster, when a master
// may have died: a dead node says nothing to its subscribers.
func (n *Notifier) RevalidateSoon() {
	if _, ok := n.rdb.(*redis.ClusterClient); !ok {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.revalidating || len(n.channels) == 0 {
		return
	}
	n.revalidating = true
	n.wg.Add(1)
	go n.revalidate()
}

// revalidateFor is how long revalidate keeps checking: long enough for a
// replica to be promoted and go-redis to learn of it.
const revalidateFor = 3 * time.Second

func (n *Notifier) revalidate() {
	defer n.wg.Done()
	defer func() {
		n.mu.Lock()
		n.revalidating = false
		n.mu.Unlock()
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(revalidateFor); time.Now().Before(end); <-tick.C {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return
		}
		channels := make([]string, 0, len(n.channels))
		for ch := range n.channels {
			channels = append(channels, ch)
		}
		n.mu.Unlock()
		for _, ch := range channels {
			ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
			at, err := n.nodeFor(ctx, ch)
			if err == nil {
				n.moveIfStale(ctx, ch, at)
			}
			cancel()
		}
	}
}

// watchEvery is how often the connections to Cluster nodes with waiting
// channels are checked.
const watchEvery = time.Second

// watch checks, while the Notifier lives, that the pub/sub connections to
// Cluster nodes with channels still reach their node (a PING on the
// connection). A node that died tells its subscribers nothing, and its slots
// move to a replica: a check whose error says the node is unavailable
// (transport.Unavailable) is reported to the cache (NodeFailed), which has
// the slot map reloaded and the channels moved (RevalidateSoon).
func (n *Notifier) watch() {
	defer n.wg.Done()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
		n.mu.Lock()
		var busy []*pubsubConn
		for _, c := range n.conns {
			if c.channels > 0 {
				busy = append(busy, c)
			}
		}
		n.mu.Unlock()
		for _, c := range busy {
			ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
			err := c.ps.Ping(ctx)
			cancel()
			if transport.Says(err, transport.Unavailable) && n.nodeFailed != nil {
				n.nodeFailed() // reloads the slot map and calls RevalidateSoon
				break
			}
		}
	}
}

// moveIfStale binds channel to at if it lives elsewhere, which tells its
// waiters to fetch again.
func (n *Notifier) moveIfStale(ctx context.Context, channel string, at node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[channel]
	if n.closed || cs == nil || cs.conn == nil || cs.conn.addr == at.addr {
		return
	}
	n.bind(ctx, cs, channel, at)
}
