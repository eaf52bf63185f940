package corral

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/epochs"
	"github.com/corralhq/corral/internal/failopen"
	"github.com/corralhq/corral/internal/flights"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/replay"
	"github.com/corralhq/corral/internal/tasks"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Cache is a stampede-safe read-through cache over Redis. It is safe for
// concurrent use. Create it with New and stop it with Close.
//
// Its parts own their state: the flights and peeks under way (flight.go,
// peek.go), the fail-open loads (failsafe.go), the queue of invalidations
// (queue.go), what it warned of (warn.go), the goroutines Close waits for
// (internal/tasks); the Cache holds them and its options.
type Cache struct {
	opts     Options
	store    *store
	notify   *notify.Notifier
	stats    counters
	near     *near.Cache // nil when off (near.go)
	newer    *near.Newer // values loaded over a newer release's entries (near.go, overNewer)
	held     *near.Held  // fail-open results, without the near cache (failsafe.go)
	tracer   Tracer      // opts.Observer when it is a Tracer, else nil (observe.go)
	outcomes bool        // opts.Observer is told the outcomes of calls: set, and not a StatsReader

	rdb      redis.UniversalClient // for the notifier, the near cache's tracking and nodeFailed: every other command goes through store (store.go)
	onParked func(channel string)  // tests only (export_test.go): a waiter waits for a notice it can hear

	ctx    context.Context // cancelled by Close; stops flights and refreshes, and loads yet to begin
	cancel context.CancelFunc
	// loads is the context of loads under way (runLoad, newBatch): Close
	// cancels it closeGrace after it began, so that a load about to end is
	// stored for the fleet rather than handed back and loaded again
	// elsewhere.
	loads    context.Context
	endLoads context.CancelFunc
	// drain is the context of writes that must happen even when callers left
	// or the Cache is closing (commits, hand-backs of leases): Close cancels
	// it RedisTimeout after it began.
	drain       context.Context
	cancelDrain context.CancelFunc
	tasks       tasks.Group // the goroutines Close waits for

	flights      flights.Group[*flight]   // the in-process flight of each key (flight.go)
	peeks        flights.Group[*peekCall] // the peek under way of each key, Fetch's (peek.go)
	batchPeeks   flights.Group[*peekCall] // and FetchMany's (and skipping calls'), never handed over
	opens        failopen.Group[opened]   // the fail-open load under way of each key (failsafe.go)
	warmed       chan struct{}            // closed once warmUp has ended, done or not (Ready)
	refreshSlots chan struct{}            // semaphore: background refreshes running (refresh.go)
	queue        *replay.Queue            // invalidations Redis is yet to get (queue.go)
	groups       *epochs.Mirror           // the group invalidations, as this process knows them (groups.go)
	records      epochs.Records           // their records in Redis
	warn         warnings                 // what was warned of, and when (warn.go)
}

// New returns a Cache that keeps its entries in rdb: a *redis.Client, a
// failover (Sentinel) client or a *redis.ClusterClient. opts may be nil for
// all defaults. New does not wait for Redis, so it succeeds while Redis is
// down (it starts learning what the first calls need in the background); it
// returns an error wrapping ErrInvalidOptions for options that make no
// sense. Close the Cache when done; Close does not close rdb.
func New(rdb redis.UniversalClient, opts *Options) (*Cache, error) {
	if rdb == nil {
		return nil, errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cache{opts: o, rdb: rdb, refreshSlots: make(chan struct{}, o.MaxBackgroundRefreshes)}
	c.ctx, c.cancel = context.WithCancel(context.Background())        // Close: no call begins
	c.loads, c.endLoads = context.WithCancel(context.Background())    // Close + closeGrace: loads end
	c.drain, c.cancelDrain = context.WithCancel(context.Background()) // Close + RedisTimeout: commits, hand-backs end
	c.flights.Joined = func(f *flight) { near.Stamp(&f.joinedAt) }    // judgeNotice's
	c.queue = c.newQueue()                                            // before the store, whose recovered hook replays it
	c.store = newStore(rdb, o, &c.stats, storeHooks{
		noticeFailed: func(err error) { c.warn.NoticeFailed(err) }, refusedWrite: func(why string) { c.warn.RefusedWrite(why) },
		nodeFailed: c.nodeFailed, recovered: c.recovered, renewalHeard: c.renewalHeard,
	})
	c.initWarnings()
	c.notify = notify.New(notify.Config{
		Client: rdb, Mode: c.pubsubMark, NodeFailed: c.nodeFailed,
		Stats: &c.stats, Timeout: o.RedisTimeout, Logger: o.Logger, Echo: wire.Echoes(o.Prefix),
	})
	// Even at CodecVersion 0: a release without a version is the oldest of
	// all, and meets the entries of any release that set one.
	c.newer = near.NewNewer()
	switch {
	case o.NearCache.Size > 0:
		if c.near, err = newNear(o, rdb); err != nil {
			return nil, errorf("%w: NearCache: %v", ErrInvalidOptions, err)
		}
	case !o.DisableFailSafe:
		c.held = near.NewHeld(o.FailSafe.Size, o.FailSafe.MaxBytes)
	}
	c.observing(o.Observer)
	c.tasks.Start(func() { c.queue.Run(c.ctx) })
	c.records = epochs.Records{Prefix: o.Prefix, Fold: epochs.NewFold(rdb), Start: c.store.start,
		Call: func(ctx context.Context, recovery bool, sc *redis.Script, keys []string, args ...any) (any, error) {
			return c.store.callAs(ctx, recovery, nil, sc, keys, 0, args...)
		}}
	c.groups = epochs.New(epochs.Config{Bound: Coherence, Read: c.records.Read, Now: near.Clock,
		Background: c.tasks.Start, Queued: func() bool { return c.queue.Len() > 0 }, Cluster: transport.IsCluster(rdb),
		Cleared: func(e int64, ended func()) { c.tasks.Start(func() { c.sweep(e); ended() }) }, Advanced: c.detachAll,
		Held: func(tag string) bool {
			if tag == "" {
				return c.queue.Has(string(epochs.Clear))
			}
			return c.queue.Has(string(epochs.HardTags)+tag) || c.queue.Has(string(epochs.SoftTags)+tag)
		}})
	c.warmUp()
	return c, nil
}

// recovered is told by the pipeline that node, found down, answers again:
// its queued invalidations go first, before its breaker lets the callers'
// calls through (queue.go).
func (c *Cache) recovered(node string) error {
	ctx, cancel := context.WithTimeout(c.drain, c.opts.RedisTimeout)
	defer cancel()
	return c.queue.Replay(ctx, node, true)
}

// nodeFailed is the Cache's reaction to a Redis node that may have failed:
// a call to it failed (the pipeline), or a pub/sub connection to it failed
// its check (the notifier). Off a Cluster there is nothing to do. On a
// Cluster a master may have died and a replica taken its slots: go-redis
// learns new slot owners from MOVED replies, which a dead node never sends,
// so the slot map is reloaded (go-redis does it at most every 200ms), and
// the notifier moves the channels whose slot moved.
func (c *Cache) nodeFailed() {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	cc.ReloadState(context.Background())
	c.notify.RevalidateSoon()
}

// pubsubMark returns how this process announces its notices (the mark of
// its notify.Mode), for the notifier.
func (c *Cache) pubsubMark(ctx context.Context) (byte, error) {
	m, err := c.store.pubsub(ctx)
	return m.Mark, err
}

// Must returns c, or panics with err. It is for set-up code:
// cache := corral.Must(corral.New(rdb, nil)).
func Must(c *Cache, err error) *Cache {
	if err != nil {
		panic(err)
	}
	return c
}

// Stats returns a snapshot of the Cache's counters.
func (c *Cache) Stats() Stats {
	s := c.stats.snapshot()
	s.BreakerOpen = c.store.pipe.BreakerOpen() && c.ctx.Err() == nil // a closed Cache has none
	s.OutageTime = c.store.pipe.OpenFor()
	s.InvalidationsPending = c.queue.Len()
	return s
}

// Close stops the Cache: no load begins, and calls waiting on Redis or on
// another process's load return ErrClosed. A load under way (a caller's or
// a background refresh) may go on for up to RedisTimeout/2 more: one that
// ends by then is stored as usual and answers its callers, so waiters in
// other processes get its value and nobody loads the key again (a rolling
// restart costs the origin nothing). One still running then gets its
// context cancelled, its callers get ErrClosed, and its lease is handed
// back (with a notice, so other processes' waiters take over at once).
// Close returns as soon as nothing is left to do, and within RedisTimeout
// (plus a few milliseconds), whatever the client's own timeouts: what it
// could not hand back by then, a lease expires on its own within LeaseTTL,
// and commands still on their way are left to the client, whose goroutines
// end once Redis answers or the client gives up. It does not wait for a
// loader that ignores its context: that loader is abandoned and its result
// dropped. Close does not close the Redis client. Later calls return
// ErrClosed; a second Close returns nil.
func (c *Cache) Close() error {
	if !c.tasks.Close() {
		return nil
	}
	deadline := time.Now().Add(c.opts.RedisTimeout)
	c.cancel()
	grace := time.AfterFunc(closeGrace(c.opts.RedisTimeout), c.endLoads)
	defer grace.Stop()
	stop := time.AfterFunc(c.opts.RedisTimeout, c.cancelDrain)
	defer stop.Stop()
	c.tasks.Wait(deadline)
	c.endLoads()
	if c.queue.Len() > 0 {
		// What is queued for Redis, within Close's bound: through breakers
		// tripped still (Redis may be back, not yet probed). What it could
		// not apply is lost with the process: dropped, and warned of.
		c.store.pipe.Recovering()
		c.queue.Flush(c.drain)
		c.abandon()
	}
	c.cancelDrain()
	tasks.WaitUntil(c.notify.Close(), deadline.Add(50*time.Millisecond))
	c.store.close()
	if c.near != nil {
		c.near.Close(deadline)
	}
	c.newer.Close()
	if c.held != nil {
		c.held.Close()
	}
	return nil
}

// closeGrace is how long Close lets loads under way go on: half its bound,
// so that the commit of a load that ends just then, or the hand-back of
// one cancelled, has the other half.
func closeGrace(redisTimeout time.Duration) time.Duration { return redisTimeout / 2 }

// closedErr returns ErrClosed for an error that comes from Close cancelling
// work, and err otherwise.
func (c *Cache) closedErr(err error) error {
	if c.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return ErrClosed
	}
	return err
}
