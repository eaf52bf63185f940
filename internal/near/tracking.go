package near

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/transport"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The near cache is kept coherent by Redis itself: server-assisted
// client-side caching (CLIENT TRACKING) in broadcasting mode, for the
// prefix of corral's entries (P:e:). Redis then announces every change to
// any entry, by corral or not (a commit, Set, Delete, a DEL by hand, an
// expiry, an eviction, FLUSHDB), on the channel __redis__:invalidate of a
// connection of our choosing (REDIRECT). Each Cache keeps, per Redis node
// (per master on a Cluster), a stream: one pub/sub connection subscribed to
// that channel, and one connection that turned tracking on, redirected to
// it. While every stream is up, the near cache serves copies; when one
// breaks (a dropped connection, a restart, a failover, a new master), every
// copy is dropped, and none is served or stored until the streams are back.
// A copy is never served past Config.TTL either way.

// InvalidationChannel is the channel Redis announces tracked changes on.
const InvalidationChannel = "__redis__:invalidate"

// trackCheck is how often a stream's connections are checked (PING).
const trackCheck = 250 * time.Millisecond

// tracker keeps the streams of a near cache.
type tracker struct {
	near   *Cache
	rdb    redis.UniversalClient
	prefix string                       // entries' prefix: "P:e:"
	failed func(node string, err error) // Config.StreamFailed

	up     atomic.Int32 // streams up
	want   atomic.Int32 // streams wanted
	stop   chan struct{}
	wg     sync.WaitGroup
	warned atomic.Bool // the failure to track was told (Config.StreamFailed)
}

// track starts keeping n coherent, as o says.
func track(n *Cache, o Config) *tracker {
	t := &tracker{near: n, rdb: o.Client, prefix: o.Prefix, failed: o.StreamFailed, stop: make(chan struct{})}
	t.wg.Add(1)
	go t.run()
	return t
}

// run keeps one stream per node, and starts over when the set of nodes
// changes (a Cluster's masters).
func (t *tracker) run() {
	defer t.wg.Done()
	for {
		nodes := t.nodes()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		t.want.Store(int32(len(nodes)))
		for _, opts := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.stream(ctx, opts)
			}()
		}
		changed := t.watchNodes(ctx, nodes)
		cancel()
		wg.Wait()
		t.setHealthy()
		if !changed {
			return // stopped
		}
	}
}

// nodes returns the options of a client for each node to track: the one
// server (or Sentinel-managed master), or each Cluster master.
func (t *tracker) nodes() []*redis.Options {
	switch c := t.rdb.(type) {
	case *redis.Client:
		return []*redis.Options{c.Options()}
	case *redis.ClusterClient:
		var mu sync.Mutex
		var out []*redis.Options
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			out = append(out, m.Options())
			mu.Unlock()
			return nil
		})
		return out
	}
	return nil
}

// watchNodes waits until Close, or until the Cluster's masters are no
// longer nodes (a failover, a resharding to a new node): it reports true
// for the latter.
func (t *tracker) watchNodes(ctx context.Context, nodes []*redis.Options) bool {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	key := func(ns []*redis.Options) string {
		var addrs []string
		for _, o := range ns {
			addrs = append(addrs, o.Addr)
		}
		return strings.Join(addrs, ",")
	}
	have := key(nodes)
	_, cluster := t.rdb.(*redis.ClusterClient)
	for {
		select {
		case <-t.stop:
			return false
		case <-tick.C:
		}
		if len(nodes) == 0 || cluster && key(t.nodes()) != have {
			return true
		}
	}
}

// stream keeps one node's stream up until ctx ends, rebuilding it after
// every break.
func (t *tracker) stream(ctx context.Context, base *redis.Options) {
	for pause := 50 * time.Millisecond; ctx.Err() == nil; pause = min(2*pause, 2*time.Second) {
		if err := t.track(ctx, base); err != nil && ctx.Err() == nil {
			if t.warned.CompareAndSwap(false, true) && t.failed != nil {
				t.failed(base.Addr, err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// streamOptions derives the options of a stream's clients from a node's:
// RESP2 (invalidations arrive as messages with a key list), a pool of its
// own, and without the node client's maintenance-notification state, which
// go-redis updates while the node's connections are set up (copying it
// would race with that).
func streamOptions(base *redis.Options) redis.Options {
	o := *base
	o.Protocol = 2
	o.PoolSize = 2
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	o.PushNotificationProcessor = nil
	return o
}

// track runs one stream until it breaks or ctx ends.
func (t *tracker) track(ctx context.Context, base *redis.Options) error {
	var subID atomic.Int64
	subOpts := streamOptions(base)
	userConnect := base.OnConnect
	subOpts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if userConnect != nil {
			if err := userConnect(ctx, cn); err != nil {
				return err
			}
		}
		id, err := cn.ClientID(ctx).Result()
		subID.Store(id)
		return err
	}
	sub := redis.NewClient(&subOpts)
	defer sub.Close()
	trkOpts := streamOptions(base)
	trk := redis.NewClient(&trkOpts)
	defer trk.Close()

	ps := sub.Subscribe(ctx, InvalidationChannel)
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil { // the confirmation
		return err
	}
	id := subID.Load()
	conn := trk.Conn()
	defer conn.Close()
	if err := conn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id, "BCAST", "PREFIX", t.prefix).Err(); err != nil {
		return err
	}
	// Copies read before the stream was up may have missed invalidations:
	// they are no longer hits (kept for fail-safe use).
	t.near.streamChanged()
	t.up.Add(1)
	t.setHealthy()
	defer func() {
		t.up.Add(-1)
		t.setHealthy()
		t.near.streamChanged()
	}()
	t.warned.Store(false)
	return t.listen(ctx, ps, conn, func() bool { return subID.Load() != id })
}

// listen applies the invalidations that arrive on ps until ctx ends or the
// stream fails: ps or the tracking connection conn stop answering, or ps
// reconnected (then it may have missed invalidations, and tracking was
// redirected to its old connection).
func (t *tracker) listen(ctx context.Context, ps *redis.PubSub, conn *redis.Conn, reconnected func() bool) error {
	last := time.Now()
	for ctx.Err() == nil {
		m, err := ps.ReceiveTimeout(ctx, trackCheck)
		switch {
		case err == nil:
		case transport.Says(err, transport.Timeout):
		case strings.Contains(err.Error(), "unsupported pubsub message payload"):
			t.near.purge() // a flush: its invalidation names no key
			continue
		default:
			return err
		}
		if reconnected() {
			return errors.New("corral: the invalidation connection reconnected")
		}
		if msg, ok := m.(*redis.Message); ok && msg.Channel == InvalidationChannel {
			t.invalidate(msg)
		}
		if time.Since(last) >= trackCheck {
			last = time.Now()
			if err := conn.Ping(ctx).Err(); err != nil {
				return err
			}
			if err := ps.Ping(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// invalidate drops the copies of the keys a message names.
func (t *tracker) invalidate(msg *redis.Message) {
	names := msg.PayloadSlice
	if names == nil && msg.Payload != "" {
		names = []string{msg.Payload}
	}
	for _, name := range names {
		if key, ok := t.keyOf(name); ok {
			t.near.Invalidate(key)
		}
	}
}

// keyOf returns the cache key of an entry name P:e:{T}:K: T never holds a
// '}', so K follows the first "}:" after the prefix.
func (t *tracker) keyOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, t.prefix+"{")
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 || i+1 >= len(rest) || rest[i+1] != ':' {
		return "", false
	}
	return rest[i+2:], true
}

// setHealthy lets the near cache serve copies only while every stream is up.
func (t *tracker) setHealthy() {
	t.near.healthy.Store(t.want.Load() > 0 && t.up.Load() == t.want.Load())
}

// close stops the streams.
// It waits for them until deadline (Close's): a stream blocked on a
// stalled Redis ends on its own once its read returns.
func (t *tracker) close(deadline time.Time) {
	t.near.healthy.Store(false)
	close(t.stop)
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}
