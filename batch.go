package corral

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/batch"
	"github.com/corralhq/corral/internal/near"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
)

// FetchMany is Fetch for many keys at once: it returns the value of each of
// keys, from Redis where an entry is there, else from loadMany, which this
// process calls once with the keys whose leases it won. Each key behaves as
// if fetched alone, with the same entries, leases, notices, negative
// caching, stale-while-revalidate, near cache, fail-open and circuit
// breaker; only the round trips and the loads are shared:
//
//   - Every key is read at once: one pipelined round trip per Redis node
//     (per master on a Cluster), each command touching one key, so no
//     command ever spans two slots (no CROSSSLOT).
//   - A key whose flight is already under way in this process (a
//     concurrent Fetch or FetchMany of it) joins that flight and gets its
//     load's result. Every other missing, stale or early-refreshed key gets
//     a flight of its own, which asks fetch.lua, as Fetch does: it takes
//     the key's lease, or waits for the process that holds it.
//   - Once each of those flights has taken its lease or not, loadMany is
//     called once with the keys whose leases this process took (missing:
//     never a key another process loads, nor one served from Redis). Each
//     key is then committed under its own lease, renewed while loadMany
//     runs, and waiters elsewhere are told of it key by key. A lease this
//     process takes later (taking over from a holder that died, or after a
//     holder's load failed) makes one more call of loadMany for its keys.
//
// loadMany returns the values of the keys it found. A key missing from its
// map was not found: cached as a negative entry for NegativeTTL, like a
// loader's ErrNotFound, and absent from FetchMany's result (keys it returns
// that it was not asked for are ignored). An error from loadMany fails
// every key of that call, each with that error, and is not cached (unless
// ErrorTTL); if it wraps ErrNotFound, none of those keys exists. loadMany
// runs detached from ctx, like Fetch's loader: under context.WithoutCancel
// of ctx, bounded by LoadTimeout, cancelled by Close; a panic becomes a
// *PanicError for each of its keys. It must be safe to call from several
// goroutines at once when keys are taken over while it runs.
//
// The result maps each key that has a value to it; the values are shared
// with other callers, as with Fetch: read them, do not modify them. A key
// found not to exist (a negative entry, or missing from loadMany's map) is
// neither in the result nor in the error. Every other key is in the error,
// a *BatchError listing each with its own cause, just as Fetch of that key
// would have returned it (ErrInvalidKey, ErrLoadTimeout, ErrRemoteLoad,
// *PanicError, loadMany's error, ctx.Err() for keys still waiting when ctx
// ended, ...); match it with errors.As, and any cause with errors.Is. Keys
// may repeat (each is fetched once). An empty key is ErrInvalidKey in the
// *BatchError, as any invalid key; an empty list of keys returns an empty
// map and nil, once the call's own checks below have passed.
//
// The call as a whole fails, with a nil map and no *BatchError, for
// ErrInvalidTTL (ttl <= 0), ErrNilLoader, ErrClosed, or ctx ended before it
// began. ttl is the soft TTL of what loadMany returns, as for Fetch.
func (c *Cache) FetchMany(ctx context.Context, keys []string, ttl time.Duration, loadMany func(ctx context.Context, missing []string) (map[string][]byte, error)) (map[string][]byte, error) {
	if err := c.ready(ctx, refuse.TTL(ttl), loadMany == nil); err != nil {
		return nil, c.refusedMany(ctx, keys, err)
	}
	load := func(ctx context.Context, keys []string) (map[string][]byte, map[string]error, error) {
		vals, err := loadMany(ctx, keys)
		return vals, nil, err
	}
	return fetchMany(ctx, c, keys, manyLoad{call: load, ttl: ttl}, batchCodec[[]byte]{})
}

// FetchManyEntries is FetchMany for a loadMany that says how long each
// value lives, and what tags it has, as FetchEntry's loader does: each
// Entry's Value, TTL, StaleTTL and Tags are used as FetchEntry uses them
// (an Entry with TTL <= 0 is returned, not stored; one with an invalid tag
// fails its key alone with ErrInvalidTag). The rest, errors included, is
// FetchMany's, without its ErrInvalidTTL.
func (c *Cache) FetchManyEntries(ctx context.Context, keys []string, loadMany func(ctx context.Context, missing []string) (map[string]Entry, error)) (map[string][]byte, error) {
	if err := c.ready(ctx, nil, loadMany == nil); err != nil {
		return nil, c.refusedMany(ctx, keys, err)
	}
	entries := &sync.Map{} // key → its Entry, as loadMany last returned it
	load := func(ctx context.Context, keys []string) (map[string][]byte, map[string]error, error) {
		found, err := loadMany(ctx, keys)
		vals := make(map[string][]byte, len(found))
		for k, e := range found {
			vals[k] = e.Value
			entries.Store(k, e)
		}
		return vals, nil, err
	}
	return fetchMany(ctx, c, keys, manyLoad{call: load, entries: entries}, batchCodec[[]byte]{})
}

// FetchMany is the typed form of Cache.FetchMany, as Fetch[T] is of
// Cache.Fetch: values are encoded with the Cache's Codec (JSON by default).
// A cached entry that does not decode as T is taken as missing and
// reloaded once, under its lease (such keys make one more call of
// loadMany); a value loadMany returned that does not encode, or does not
// decode, fails its key alone, with the codec's error, wrapped. The result
// and its errors are those of Cache.FetchMany; treat its values as
// read-only when the near cache is on (its copies are shared; without it,
// each FetchMany decodes its own).
func FetchMany[T any](ctx context.Context, c *Cache, keys []string, ttl time.Duration, loadMany func(ctx context.Context, missing []string) (map[string]T, error)) (map[string]T, error) {
	if err := c.ready(ctx, refuse.TTL(ttl), loadMany == nil); err != nil {
		return nil, c.refusedMany(ctx, keys, err)
	}
	load := func(ctx context.Context, keys []string) (map[string][]byte, map[string]error, error) {
		found, err := loadMany(ctx, keys)
		if err != nil {
			return nil, nil, err
		}
		vals, failed := batch.Encode(keys, found, c.opts.Codec.Marshal)
		return vals, failed, nil
	}
	bc := batchCodec[T]{version: strconv.Itoa(c.opts.CodecVersion), decode: func(b []byte) (T, error) {
		var v T
		err := c.opts.Codec.Unmarshal(b, &v)
		return v, err
	}}
	if c.near != nil {
		bc.typ = reflect.TypeFor[T]()
	}
	return fetchMany(ctx, c, keys, manyLoad{call: load, ttl: ttl}, bc)
}

// batchCodec says how a FetchMany returns values of type V.
type batchCodec[V any] struct {
	version string                    // the how.version of its calls ("" for any)
	typ     reflect.Type              // the type of its near copies (nil for []byte)
	decode  func(b []byte) (V, error) // nil when V is []byte, returned as is
}

// fetchMany is FetchMany for values of type V: the near cache first, then
// Redis and loads (fetchCalls), then the values decoded, where an entry
// that does not decode is fetched once more as missing, as Fetch[T] does.
// Each key's outcome is counted once, as Fetch counts a call's.
func fetchMany[V any](ctx context.Context, c *Cache, keys []string, ml manyLoad, bc batchCodec[V]) (map[string]V, error) {
	out, errs := make(map[string]V, len(keys)), map[string]error{}
	calls := c.batchCalls(ctx, keys, bc.version, errs)
	kept := calls[:0] // the calls the near cache did not answer, with their XFetch draws
	for i := range calls {
		if c.near != nil && bc.near(ctx, c, &calls[i], out, errs) {
			continue
		}
		calls[i].how.draw(c)
		kept = append(kept, calls[i])
	}
	calls = kept
	for len(calls) > 0 {
		c.fetchCalls(ctx, calls, ml)
		var again []keyCall // an entry that did not decode (once a key), or a late answer
		for i := range calls {
			if !bc.collect(c, &calls[i], out, errs) {
				again = append(again, calls[i])
				continue
			}
			c.count(ctx, calls[i].key, calls[i].a.out)
		}
		calls = again
	}
	if len(errs) > 0 {
		return out, &BatchError{Errs: errs}
	}
	return out, nil
}

// keyCall is one key of a FetchMany, and its answer.
type keyCall struct {
	key    string
	how    how
	pc     *peekCall // its peek, until it is read
	pcAt   int64     // when it joined pc, sent by another call (startPeek; 0 for its own)
	f      *flight   // the flight that answers it, until it does
	joined bool      // f is another call's (await)
	at     int64     // when it joined f, if joined (near.Clock)
	a      answer
	keep   *peekCopy // as for fetch: what the near cache may keep of a
}

// batchCalls returns a call for each distinct key of keys, each with its
// own XFetch draw; an empty key gets ErrInvalidKey in errs instead, and
// counts as an error.
func (c *Cache) batchCalls(ctx context.Context, keys []string, version string, errs map[string]error) []keyCall {
	keys = batch.Distinct(keys)
	calls := make([]keyCall, 0, len(keys))
	for _, key := range keys {
		if key == "" {
			errs[key] = c.refused(ctx, key, refuse.Key(ctx, key))
			continue
		}
		calls = append(calls, keyCall{key: key, how: how{version: version}})
	}
	return calls
}

// near answers k from the near cache, as Fetch would, and reports whether
// it did.
func (bc batchCodec[V]) near(ctx context.Context, c *Cache, k *keyCall, out map[string]V, errs map[string]error) bool {
	e, ok := c.nearGet(near.Key{Key: k.key, Type: bc.typ}, &k.how)
	if !ok {
		return false
	}
	c.nearHit(ctx, k.key)
	switch {
	case e.Err == nil:
		out[k.key], _ = e.Val.(V)
	case !isNotFound(e.Err):
		errs[k.key] = e.Err
	}
	return true
}

// collect puts k's answer into out or errs (a key not found into neither),
// and keeps a near copy of it as Fetch would. It reports false, leaving
// them alone, for a cached entry that does not decode as V, unless k was
// fetched again for one already (k is then to be fetched again, as
// missing), and for an answer k joined too late for (answerFor: k is asked
// again).
func (bc batchCodec[V]) collect(c *Cache, k *keyCall, out map[string]V, errs map[string]error) bool {
	a := k.a
	if a.out == outLate { // joined a flight too late for its answer (answerFor): ask again
		k.a, k.at = answer{}, 0
		return false
	}
	var v V
	if a.err == nil && bc.decode == nil {
		v, _ = any(a.val).(V)
	} else if a.err == nil {
		var err error
		if v, err = bc.decode(a.val); err != nil && a.soft != 0 && k.how.skip == 0 {
			c.warn.DecodeFailed(k.key, fmt.Sprintf("%T", v))
			k.how.skip, k.a, k.keep = a.soft, answer{}, nil
			return false
		} else if err != nil {
			a.err = errorf("decode %q as %T: %w", k.key, v, err)
		}
	}
	switch {
	case a.err == nil:
		out[k.key] = v
		c.keepNear(k.key, bc.typ, k.keep, v, nil, len(a.val))
	case isNotFound(a.err):
		c.keepNear(k.key, bc.typ, k.keep, nil, a.err, 0)
	default:
		errs[k.key] = a.err
	}
	return true
}

// fetchCalls answers each of calls as fetch would answer it alone: the
// keys whose flight is under way join it; the others are peeked all at
// once, and those the peeks do not answer get flights, whose loads go to
// calls of ml (newBatch). It returns when every call has its answer.
func (c *Cache) fetchCalls(ctx context.Context, calls []keyCall, ml manyLoad) {
	c.peekAll(ctx, calls)
	r := c.planRescueMany(ctx, calls) // a caller's deadline before corral's verdict (rescue.go)
	fire, stop := r.Timer()
	defer func() { stop() }()
	if fire != nil && waitAll(ctx, calls, fire, peekDone) {
		c.rescueWaiting(ctx, &r, calls, ml, peekDone)
		fire, stop = r.Again() // for those whose node was heard (rescue.go)
	}
	b := c.newBatch(ctx, ml.call, batch.Paced)
	group := wire.NewToken(0) // its keys' leases are members of group leases of this id (lease.go)
	for i := range calls {
		if k := &calls[i]; k.pc != nil {
			c.startFlight(ctx, k, ml, b, group)
		}
	}
	b.Started()
	for fire != nil && waitAll(ctx, calls, fire, flightDone) {
		c.rescueWaiting(ctx, &r, calls, ml, flightDone)
		fire, stop = r.Again() // nil once had
	}
	for i := range calls {
		if k := &calls[i]; k.f != nil {
			k.a, k.f = c.await(ctx, k.f, k.joined, k.at), nil
		}
	}
}

// peekAll joins the flights under way of calls' keys, and sends peeks of
// the others together: the pipeline takes them in one batch, one round trip
// per node. A lone peek may be read inline, as Fetch's is.
func (c *Cache) peekAll(ctx context.Context, calls []keyCall) {
	var ops []*transport.Op
	for i := range calls {
		k := &calls[i]
		if f, ok := c.flights.JoinRunning(k.key); ok && k.how.skip == 0 {
			k.f, k.joined, k.at = f, true, c.joined()
			continue
		} else if ok {
			c.flights.Leave(f.key, f, f.stop)
		}
		if c.pending(k.key) {
			k.pc = pendingPeek // not from Redis until its invalidation lands there (queue.go)
			continue
		}
		var o *transport.Op
		if k.pc, o, k.pcAt = c.startPeek(k.key, nil, loader{}, how{}); o != nil {
			ops = append(ops, o)
		}
	}
	if len(ops) > 0 {
		ops[0].ReadBy, _ = ctx.Deadline()
		c.sendPeeks(ops)
	}
}

// startFlight answers k from its peek, or joins or starts its key's flight,
// whose loads go to b, its lease a member of b's group leases (group).
func (c *Cache) startFlight(ctx context.Context, k *keyCall, ml manyLoad, b *batch.Batch, group string) {
	pc, perr := c.awaitPeek(ctx, k.pc)
	pc, k.pc = pc.forJoiner(k.pcAt), nil
	var failed error
	var done bool
	if k.a, k.keep, done, failed = c.afterPeek(ctx, k.key, pc, perr, k.how); done {
		return
	}
	if err := b.Expect(ctx, k.key); err != nil {
		k.a = answer{err: err}
		return
	}
	f, joined, ok := c.join(ctx, k.key, ml.loader(b, k.key, group), k.how, failed, b.Decider(k.key))
	switch {
	case !ok:
		k.a = answer{err: ErrClosed}
	case joined:
		k.at = c.joined()
	}
	if !ok || joined {
		b.Decided(k.key) // not b's flight
	}
	k.f, k.joined = f, joined
}

// BatchError is the error of FetchMany when some of its keys got neither a
// value nor "not found": Errs maps each such key to its own error, the one
// Fetch of that key alone would have returned. Match it with errors.As;
// errors.Is matches any key's error through it (Unwrap).
type BatchError struct {
	Errs map[string]error // by key; never empty
}

// Error summarises: how many keys failed, and the first few (in key order)
// with the first line of their error.
func (e *BatchError) Error() string { return batch.Describe(e.Errs) }

// Unwrap returns each key's error, in key order.
func (e *BatchError) Unwrap() []error { return batch.InKeyOrder(e.Errs) }
