package corral

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/wire"
	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
)

// Cache is a stampede-safe read-through cache over Redis. It is safe for
// concurrent use. Create it with New and stop it with Close.
type Cache struct {
	opts     Options
	store    *store
	notify   *notify.Notifier
	stats    counters
	near     *nearCache                      // nil when off (near.go)
	newer    *otter.Cache[string, newerCopy] // values loaded over a newer release's entries (newer.go)
	tracker  *tracker                        // keeps near coherent (tracking.go)
	tracer   Tracer                          // opts.Observer when it is a Tracer, else nil (observe.go)
	outcomes bool                            // opts.Observer is told the outcomes of calls: set, and not a StatsReader

	rdb         redis.UniversalClient // for the notifier, the tracker and nodeFailed: every command goes through store (store.go)
	foreignWarn everyMinute           // foreignKey's
	onParked    func(channel string)  // tests only (export_test.go): a waiter waits for a notice it can hear
	policyNext  atomic.Int64          // when the eviction policy may be checked (eviction.go)

	ctx    context.Context // cancelled by Close; stops flights, loads and refreshes
	cancel context.CancelFunc
	// drain is the context of writes that must happen even when callers left
	// or the Cache is closing (commits, hand-backs of leases): Close cancels
	// it RedisTimeout after it began.
	drain       context.Context
	cancelDrain context.CancelFunc

	refreshSlots chan struct{} // semaphore: background refreshes running

	queue   *invalidations                   // invalidations Redis is yet to get (queue.go)
	held    *otter.Cache[string, *heldValue] // fail-open results, without the near cache (failsafe.go)
	heldSeq atomic.Uint64                    // bumped by every invalidation of held
	openMu  sync.Mutex                       // guards opens
	opens   map[string]*openLoad             // the fail-open load under way of each key (failsafe.go)

	warnedLarge  sync.Map // entry names warned of a value over MaxValueBytes
	warnedDecode sync.Map // keys warned of an entry that did not decode
	warnedRights sync.Map // NOPERM messages logged
	warnedKeys   atomic.Int64
	checked      atomic.Bool // the first-use checks have started (rights.go)
	warnNotice   everyMinute
	warnRefused  everyMinute
	warnFailOpen everyMinute
	warnStore    everyMinute
	warnRelease  everyMinute
	warnRenew    everyMinute
	faults       faults // for Health (health.go)

	peekMu sync.Mutex           // guards peeks
	peeks  map[string]*peekCall // the peek under way of each key (hit.go)

	mu      sync.Mutex         // guards flights, closed, and wg.Add
	flights map[string]*flight // the in-process flight of each key
	closed  bool
	wg      sync.WaitGroup // flights and background refreshes; Close waits for them
}

// New returns a Cache that keeps its entries in rdb: a *redis.Client, a
// failover (Sentinel) client or a *redis.ClusterClient. opts may be nil for
// all defaults. New does not wait for Redis, so it succeeds while Redis is
// down (it starts learning what the first calls need in the background); it returns an error wrapping ErrInvalidOptions for options that make
// no sense. Close the Cache when done; Close does not close rdb.
func New(rdb redis.UniversalClient, opts *Options) (*Cache, error) {
	if rdb == nil {
		return nil, errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	drain, cancelDrain := context.WithCancel(context.Background())
	c := &Cache{
		opts:         o,
		rdb:          rdb,
		ctx:          ctx,
		cancel:       cancel,
		drain:        drain,
		cancelDrain:  cancelDrain,
		refreshSlots: make(chan struct{}, o.MaxBackgroundRefreshes),
		flights:      make(map[string]*flight),
		peeks:        make(map[string]*peekCall),
		opens:        make(map[string]*openLoad),
		queue:        newInvalidations(o.MaxPendingInvalidations),
	}
	c.store = newStore(rdb, o, &c.stats, storeHooks{
		noticeFailed: c.noticeFailed, refusedWrite: c.refusedWrite, nodeFailed: c.nodeFailed,
		recovered: c.recovered,
	})
	c.notify = notify.New(notify.Config{
		Client: rdb, Mode: c.pubsubMark, NodeFailed: c.nodeFailed,
		Stats: &c.stats, Timeout: o.RedisTimeout, Logger: o.Logger,
	})
	// Even at CodecVersion 0: a release without a version is the oldest of
	// all, and meets the entries of any release that set one.
	c.newer = newNewerCopies()
	safeTTL := o.FailSafe.TTL
	if o.DisableFailSafe {
		safeTTL = 0
	}
	switch {
	case o.NearCache.Size > 0:
		if c.near, err = newNearCache(o.NearCache, safeTTL); err != nil {
			return nil, errorf("%w: NearCache: %v", ErrInvalidOptions, err)
		}
		c.tracker = newTracker(c.near, rdb, o.Prefix, o.Logger)
	case !o.DisableFailSafe:
		c.held = newHeld(o.FailSafe)
	}
	c.observing(o.Observer)
	c.wg.Add(1)
	go c.replayer()
	c.warmUp()
	return c, nil
}

// recovered is told by the pipeline that node, found down, answers again:
// its queued invalidations go first, before its breaker lets the callers'
// calls through (queue.go).
func (c *Cache) recovered(node string) {
	ctx, cancel := context.WithTimeout(c.drain, c.opts.RedisTimeout)
	defer cancel()
	c.replay(ctx, node, true)
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
// its pubsubMode), for the notifier.
func (c *Cache) pubsubMark(ctx context.Context) (byte, error) {
	m, err := c.store.pubsub(ctx)
	return m.mark, err
}

// Must returns c, or panics with err. It is for set-up code:
// cache := corral.Must(corral.New(rdb, nil)).
func Must(c *Cache, err error) *Cache {
	if err != nil {
		panic(err)
	}
	return c
}

// Get returns key's cached value without loading it: fresh or, inside the
// stale window, stale. It returns ErrMiss when there is no entry,
// ErrNotFound when the entry caches a loader's ErrNotFound, and an error
// wrapping ErrCachedFailure while a failure is cached (ErrorTTL).
//
// While Redis cannot be used for the call (refused, silent, the breaker
// open, AUTH refused), Get answers from what this process holds for
// fail-safe use, as Fetch does (Options.FailSafe; Stats.FailSafeHits), and
// fails only when it holds nothing. A key whose Delete or Set is still
// queued for Redis (see Delete) is ErrMiss: this process does not read what
// Redis held before its invalidation.
//
// Other errors: ErrInvalidKey, ErrClosed, ctx.Err(), ErrPermission (an ACL
// right missing), ErrCircuitOpen and ErrRedisTimeout (Redis failing), each
// wrapped with context.
func (c *Cache) Get(ctx context.Context, key string) ([]byte, error) {
	if err := c.check(ctx, key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.queue.has(key) {
		return nil, ErrMiss // invalidated here, and Redis has not heard yet (queue.go)
	}
	v, kind, ok, err := c.store.get(ctx, wire.NewNames(c.opts.Prefix, key))
	switch {
	case err != nil:
		c.countRedisError(ctx, err)
		if redisFailed(err) && ctx.Err() == nil {
			if a, held := c.failSafe(key); held {
				return a.val, a.err // not a call: Stats count none of Get's answers
			}
		}
		return nil, err
	}
	c.firstUse()
	if !ok {
		return nil, ErrMiss
	}
	return entryAnswer(v, kind)
}

// entryAnswer is what a cached entry answers: its value, ErrNotFound, or its
// cached failure.
func entryAnswer(v []byte, kind wire.Kind) ([]byte, error) {
	switch kind {
	case wire.NotFound:
		return nil, ErrNotFound
	case wire.Failure:
		return nil, errorf("%w: %s", ErrCachedFailure, bareText(string(v)))
	}
	return v, nil
}

// Set stores value under key for ttl (the soft TTL, spread by Jitter; the
// entry lives StaleTTL longer). It revokes any lease on key, so a load that
// started before Set can never overwrite value, and wakes the waiters.
// A nil or empty value is a real value.
//
// Errors: ErrInvalidKey, ErrInvalidTTL, ErrValueTooLarge (over
// MaxValueBytes), ErrClosed, ErrWriteRefused (Redis out of memory, or a
// replica), ErrPermission (an ACL right missing), ErrCircuitOpen and
// ErrRedisTimeout (Redis failing), each wrapped with context. A notice Redis
// refused to publish does not fail Set: the write stood
// (Stats.NoticesFailed counts it).
func (c *Cache) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	if ttl <= 0 {
		return errorf("%w: %v", ErrInvalidTTL, ttl)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	if len(value) > c.opts.MaxValueBytes {
		return errorf("%w: %d bytes, MaxValueBytes is %d", ErrValueTooLarge, len(value), c.opts.MaxValueBytes)
	}
	_, err := c.store.commit(ctx, wire.NewNames(c.opts.Prefix, key), "", c.entry(value, wire.Value, c.freshness(ttl), 0))
	c.detach(key)
	if err != nil {
		if !errors.Is(err, ErrWriteRefused) {
			c.countRedisError(ctx, err)
		}
		return c.invalidateLater(ctx, key, err) // applied as a Delete: a newer value may come meanwhile
	}
	c.firstUse()
	c.supersede(ctx, key)
	return nil
}

// Delete invalidates key: it removes the entry, revokes any lease (a load
// that started before Delete can never store its result afterwards) and
// tells waiters to re-check. Deleting a missing key is not an error; the
// errors are those of Set, but ErrInvalidTTL and ErrValueTooLarge.
func (c *Cache) Delete(ctx context.Context, key string) error {
	if err := c.check(ctx, key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := c.store.delete(ctx, wire.NewNames(c.opts.Prefix, key))
	c.detach(key)
	switch {
	case errors.Is(err, ErrWriteRefused):
		c.refusedWrite(err.Error())
	case err != nil:
		c.countRedisError(ctx, err)
	default:
		c.firstUse()
		c.supersede(ctx, key)
		return nil
	}
	return c.invalidateLater(ctx, key, err)
}

// detach makes calls that start after a Delete or Set of key start a flight
// of their own rather than join one that began before the write (and would
// answer with what was there before it). The detached flight still answers
// its callers.
func (c *Cache) detach(key string) {
	c.mu.Lock()
	delete(c.flights, key)
	c.mu.Unlock()
	c.peekMu.Lock()
	delete(c.peeks, key)
	c.peekMu.Unlock()
	if c.near != nil {
		c.near.invalidate(key) // at once here; other processes hear of it from Redis
	}
	c.forget(key)
}

// Stats returns a snapshot of the Cache's counters.
func (c *Cache) Stats() Stats {
	s := c.stats.snapshot()
	s.BreakerOpen = c.store.breakerOpen() && c.ctx.Err() == nil // a closed Cache has none
	s.OutageTime = c.store.openFor()
	s.InvalidationsPending = int(c.queue.n.Load())
	return s
}

// Close stops the Cache: calls in progress return ErrClosed, running loads
// get their context cancelled and their leases are handed back (with a
// notice, so other processes' waiters take over). Close returns within
// RedisTimeout (plus a few milliseconds), whatever the client's own
// timeouts: what it could not hand back by then, a lease expires on its own
// within LeaseTTL, and commands still on their way are left to the client,
// whose goroutines end once Redis answers or the client gives up. It does
// not wait for a loader that ignores its context: that loader is abandoned
// and its result dropped. Close does not close the Redis client. Later calls
// return ErrClosed; a second Close returns nil.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	deadline := time.Now().Add(c.opts.RedisTimeout)
	c.cancel()
	stop := time.AfterFunc(c.opts.RedisTimeout, c.cancelDrain)
	defer stop.Stop()
	waitUntil(&c.wg, deadline)
	if c.queue.n.Load() > 0 {
		// What is queued for Redis, within Close's bound: through breakers
		// tripped still (Redis may be back, not yet probed). What it could
		// not apply is lost with the process: dropped, and warned of.
		c.store.recovering()
		c.flushQueue()
		c.queue.abandon(c)
	}
	c.cancelDrain()
	waitUntil(c.notify.Close(), deadline.Add(50*time.Millisecond))
	c.store.close()
	if c.near != nil {
		c.tracker.close(deadline)
		c.near.close()
	}
	c.newer.StopAllGoroutines()
	if c.held != nil {
		c.held.StopAllGoroutines()
	}
	return nil
}

// waitUntil waits for wg, or until deadline. It reports whether wg is done.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// check rejects calls with an empty key or on a closed Cache. A nil ctx is
// a programming error, and panics with a message that says so (as the
// standard library does).
func (c *Cache) check(ctx context.Context, key string) error {
	if ctx == nil {
		panic("corral: nil Context")
	}
	if key == "" {
		return errorf("%w: empty key", ErrInvalidKey)
	}
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	c.checkPolicySoon()
	return nil
}

// entry builds the write of an entry: its soft TTL (fr's, NegativeTTL for
// a negative entry, ErrorTTL for a cached failure) spread by ±Jitter unless
// the loader set it (fr.exact), its hard TTL fr.stale longer (for values
// only: a cached "not found" or failure has no stale window). An entry
// with a stale window is written without its load's duration, so that
// early refresh (XFetch), which needs it, never picks it: it is refreshed
// once stale instead, wherever it is read (the peek, fetch.lua, the near
// cache).
func (c *Cache) entry(value []byte, kind wire.Kind, fr freshness, took time.Duration) entryWrite {
	ttl, exact := fr.soft, fr.exact
	switch kind {
	case wire.NotFound:
		ttl, exact = c.opts.NegativeTTL, false
	case wire.Failure:
		ttl, exact = c.opts.ErrorTTL, false
	}
	ttl = min(ttl, MaxTTL)
	if j := c.opts.Jitter; j > 0 && !exact {
		ttl = min(time.Duration(float64(ttl)*(1+j*(2*c.opts.Rand()-1))), MaxTTL)
	}
	w := entryWrite{value: value, kind: kind, soft: max(ttl, time.Millisecond), took: took}
	w.hard = w.soft
	if kind == wire.Value {
		w.hard += min(fr.stale, MaxTTL) // at most 2*MaxTTL: no overflow
		if exact {
			w.expires = fr.from.Add(w.soft)
		}
	}
	if w.hard > w.soft || kind != wire.Value {
		w.took = 0 // refreshed once stale, or (not found, failure) not refreshed early at all
	}
	return w
}

// MaxTTL caps every TTL corral writes (soft TTLs, StaleTTL, NegativeTTL,
// ErrorTTL): longer ones, such as math.MaxInt64 meant as "forever", are
// stored as 100 years.
const MaxTTL = 100 * 365 * 24 * time.Hour

// earlyFactor draws XFetch's x = Beta * -ln(U), U uniform in (0, 1]; 0 when
// early refresh is off, or when a stale window makes it needless.
func (c *Cache) earlyFactor() float64 {
	if !c.earlyRefresh() {
		return 0
	}
	return c.opts.Beta * -math.Log(1-c.opts.Rand())
}

// earlyRefresh reports whether XFetch's early refresh is on: it is off
// when disabled, and with a stale window (stale-while-revalidate refreshes
// instead). An entry with a stale window of its own (FetchEntry) is not
// refreshed early either way: it is written without the load's duration
// XFetch needs (Cache.entry).
func (c *Cache) earlyRefresh() bool {
	return !c.opts.DisableEarlyRefresh && c.opts.StaleTTL <= 0
}

// draw makes the XFetch draw into h.x, unless it was made already.
func (h *how) draw(c *Cache) {
	if !h.drawn {
		h.x, h.drawn = c.earlyFactor(), true
	}
}

// leaseToken returns a new lease token, whose first byte says how this
// process announces the end of its loads once it knows (wire.Announces).
func (c *Cache) leaseToken() string {
	var mark byte
	if m := c.store.mode.Load(); m != nil {
		mark = m.mark
	}
	return wire.NewToken(mark)
}

// closedErr returns ErrClosed for an error that comes from Close cancelling
// work, and err otherwise.
func (c *Cache) closedErr(err error) error {
	if c.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return ErrClosed
	}
	return err
}
