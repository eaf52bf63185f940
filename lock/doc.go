// Package lock is a distributed lock on Redis with fencing tokens, for
// processes that share one Redis deployment (a single server, a master
// managed by Sentinel, or a Cluster).
//
//	locks, err := lock.New(rdb, &lock.Options{Retry: lock.ExponentialBackoff(10*time.Millisecond, time.Second)})
//	l, err := locks.Obtain(ctx, "invoice:42", 30*time.Second)
//	if err != nil {
//		return err // errors.Is(err, lock.ErrNotObtained): someone else has it
//	}
//	defer l.Release(ctx)
//	err = store.Write(ctx, invoice, l.Fence()) // the store refuses older fences
//
// # Keys
//
// For a lock key K under prefix P (Options.Prefix, default "lock"):
//
//	P:l:{T}:K  the lock: a hash with o (the holder's random 128-bit token)
//	           and f (its fencing token), with PX = the lock's TTL
//	P:f:{T}:K  the fencing counter: the last token handed out for K,
//	           with no expiry
//
// T is K's own hash tag when it has a non-empty one, otherwise the hex of
// K's 64-bit FNV-1a hash (the rule of the corral package). Both names share
// one Cluster slot, so every script gets all the keys it touches on one
// node. The counter outlives every holder on purpose: it stays, a few dozen
// bytes plus the key's length, for every key ever locked. Deleting it gives up the guarantee below
// for that key.
//
// Obtain takes a free lock in one script (obtain.lua), which also hands out
// the fencing token. Refresh, Release and TTL act only for the holder's
// token (compare-and-set, compare-and-delete), so a holder whose lock
// expired can't refresh or release the next holder's lock. This is the
// single-instance pattern of the Redis documentation's "Distributed Locks
// with Redis", plus fencing. The scripts are in scripts/*.lua.
//
// # Holding a lock
//
// A Lock's validity is its TTL less a clock-drift allowance (1% of the TTL
// plus 2 ms, the figure the Redis documentation uses for Redlock). It is
// counted from when the request that obtained or last refreshed it was sent,
// so Redis can't have expired the lock sooner unless its clock runs fast.
// Lock.Done closes when the validity runs out, on Release, or when Redis
// says the lock is no longer this holder's: the holder should stop then.
// With Options.Watchdog, each Lock refreshes itself every third of its TTL
// until Release, which stops the watchdog before it sends the release. The
// retry strategies (NoRetry, LinearBackoff, ExponentialBackoff with full
// jitter, LimitRetry) decide whether Obtain waits for a held lock. Obtain
// never waits for a lock past its context's end; releasing what a try cut
// short by it may have taken costs at most a second more.
//
// # Mutual exclusion is not enough
//
// A holder can't know that it still holds the lock at the moment its write
// reaches the resource. A garbage-collection pause, a stalled VM or a slow
// network can delay a write until after the lock expired and another
// holder took it. Then both write. Martin Kleppmann makes this point in "How
// to do distributed locking" (2016). His remedy is a fencing token: a number
// that grows with every new holder. Each write carries it, and the resource
// refuses a write whose token is smaller than one it has already seen (a
// database row's version column, checked in the UPDATE, is enough). Lock.Fence
// is that token. A lock on Redis is an efficiency tool, preventing most
// duplicate work. It becomes a correctness guarantee only when the resource
// checks the fencing token, and only while the tokens keep their order.
//
// # The fencing guarantee
//
// obtain.lua gives each new holder of K the larger of two values: the
// counter plus one, and the Redis server's clock in microseconds. It then
// stores that value in the counter. Tokens are positive and below 2^53.
//
// Guaranteed: while the counter key survives, every holder's token is larger
// than the tokens of all earlier holders of K, whatever the clocks do. The
// counter survives when Redis keeps its writes. That means maxmemory-policy
// noeviction, or any volatile-* policy, which only evicts keys with an
// expiry, and the counter has none. It also means persistence that doesn't
// lose acknowledged writes across a restart (AOF with appendfsync always),
// no FLUSHALL or DEL of the counter, and no failover that loses writes.
//
// Not guaranteed: when the counter is lost or rolled back, tokens fall back
// on the server clock. That is the case after eviction under an allkeys-*
// policy, a restart without persistence (or one that loses the last second
// of writes, with appendfsync everysec), a failover to a replica that had
// not received the latest writes (replication is asynchronous), or the
// counter deleted. The next token is then the issuing server's clock, which
// is larger than the earlier tokens in the usual case: the same host after
// a restart, or a promoted replica whose clock is close to the old master's.
// It is not larger if that clock is behind the clock that issued the earlier
// tokens. A clock stepped back, or a replica whose clock lags the old
// master's by more than the time from the last lost write to the first new
// lock, can hand out a token that an earlier holder already had or exceeded.
// The same events can also lose the lock itself, so two holders may hold K
// at once, and then only the tokens, resting on the clocks as above, tell
// them apart. Under any maxmemory-policy but noeviction a held lock may be
// evicted before its TTL runs out, volatile-* ones included (the lock has a
// TTL; volatile-ttl evicts the keys closest to expiry first), and another
// holder may then take it: under volatile-* the counter survives, so the
// tokens still tell the holders apart. A server without persistence that stays down for longer
// than the longest lock TTL before it restarts, as the Redis documentation
// advises, keeps holders apart, though not the counter.
//
// For a resource that must never accept two writers, use a consensus system
// (etcd, ZooKeeper) for the tokens, as Kleppmann advises. Use this package
// where Redis is configured as above and the rare failure is tolerable.
//
// Sources: Redis documentation, "Distributed Locks with Redis", "Key
// eviction" and "Redis persistence"; Martin Kleppmann, "How to do
// distributed locking", 8 February 2016; Marc Brooker, "Exponential Backoff
// And Jitter", AWS Architecture Blog, 2015.
package lock
