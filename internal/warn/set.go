package warn

import (
	"context"
	"errors"
	"github.com/corralhq/corral/internal/wire"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/stats"
	"github.com/redis/go-redis/v9"
)

// Config is what a Set needs of its Cache.
type Config struct {
	Logger *slog.Logger
	// Stats are the Cache's counters: a Set adds to NoticesFailed,
	// DecodeFailures, WritesRefused, ValuesTooLarge and RedisErrors.
	Stats *stats.Counters
	// Permission and WriteRefused are corral.ErrPermission and
	// corral.ErrWriteRefused, which the errors a Set meets and records wrap.
	Permission, WriteRefused error
	// Go runs f in the background, under a context bounded by
	// RedisTimeout, as a goroutine Close waits for (nothing once closed).
	Go func(f func(ctx context.Context))
	// KeyType reads the type of the key at name (TYPE).
	KeyType func(ctx context.Context, name string) (string, error)
}

// Set is what a Cache counts and warns of when Redis refuses something, or
// an entry does not decode, and the latest such fault, for its Health.
type Set struct {
	cfg Config

	// At warn level once a minute at most:
	notice   Minutely // notices Redis refused to publish
	refused  Minutely // writes Redis refused
	foreign  Minutely // keys of another type at an entry's name
	store    Minutely // commits that failed
	release  Minutely // leases not handed back
	renew    Minutely // renewals that failed
	lost     Minutely // leases lost during their loads
	late     Minutely // renewals that reached Redis too late
	failOpen Minutely // fail-open loads

	// Once per key or message, at most MaxKeys remembered in all:
	large  sync.Map // entry names of values over MaxValueBytes
	decode sync.Map // keys of entries that did not decode
	rights sync.Map // NOPERM messages
	keys   Keys

	last atomic.Pointer[fault] // the latest fault that leaves Redis answering
}

// New returns a Set that has warned of nothing.
func New(cfg Config) *Set { return &Set{cfg: cfg} }

// HealthWindow is how long after it was last seen a fault that leaves
// Redis answering (a right denied, writes refused) makes Recent report it.
const HealthWindow = 10 * time.Second

// fault is a Redis fault a call met, and when.
type fault struct {
	err error
	at  time.Time
}

func (s *Set) seen(err error) { s.last.Store(&fault{err: err, at: time.Now()}) }

// Recent returns the latest fault that leaves Redis answering seen within
// HealthWindow (a right denied, writes refused), or nil.
func (s *Set) Recent() error {
	if l := s.last.Load(); l != nil && time.Since(l.at) < HealthWindow {
		return l.err
	}
	return nil
}

// errAttr is the "err" attribute of a record: err without corral's prefix,
// which the record's message says already.
func errAttr(err error) slog.Attr { return errprefix.Attr(errprefix.Corral, err) }

// NoticeFailed counts a notice Redis refused to publish, after a write
// that stood (no channel rights: waiters elsewhere fall back to
// re-checking), and warns of it once a minute at most.
func (s *Set) NoticeFailed(err error) {
	s.cfg.Stats.NoticesFailed.Add(1)
	if s.notice.Allow() {
		s.cfg.Logger.Warn("corral: Redis refused to publish a notice; the write stands, and waiters re-check on their own", errAttr(err))
	}
}

// DecodeFailed counts a cached entry of key that did not decode (as what:
// a type, or its payload), and warns of it once per key.
func (s *Set) DecodeFailed(key, what string) {
	s.cfg.Stats.DecodeFailures.Add(1)
	if s.keys.Once(&s.decode, key) {
		s.cfg.Logger.Warn("corral: a cached entry does not decode; reloading it", "key", key, "as", what)
	}
}

// TooLarge counts a loaded value of size bytes over max (MaxValueBytes),
// not stored under the entry name, and warns of it once per name.
func (s *Set) TooLarge(name string, size, max int) {
	s.cfg.Stats.ValuesTooLarge.Add(1)
	if s.keys.Once(&s.large, name) {
		s.cfg.Logger.Warn("corral: a loaded value is over MaxValueBytes; it is returned but not stored",
			"key", name, "bytes", size, "max", max)
	}
}

// PermissionDenied records a right the ACL user lacks (err wraps
// ErrPermission and Redis's NOPERM text, which names it), for Recent, and
// logs it once per right.
func (s *Set) PermissionDenied(err error) {
	s.seen(err)
	var reply redis.Error
	what := err.Error()
	if errors.As(err, &reply) {
		what = reply.Error()
	}
	s.RightDenied(what)
}

// RightMissing is PermissionDenied for an err that is ErrPermission, and
// nothing for another.
func (s *Set) RightMissing(err error) {
	if errors.Is(err, s.cfg.Permission) {
		s.PermissionDenied(err)
	}
}

// RightDenied logs Redis's message denying a right, once per message.
func (s *Set) RightDenied(what string) {
	// Redis appends where in a script an error was raised: not part of
	// which right is missing.
	what, _, _ = strings.Cut(what, " script: ")
	if s.keys.Once(&s.rights, what) {
		s.cfg.Logger.Error("corral: Redis denies a right corral needs; calls that need it return ErrPermission (see the README's ACL rule)", "err", what)
	}
}

// RefusedWrite counts a write Redis refused while it still serves reads
// (out of memory, a replica), records it for Recent, and warns of it once
// a minute at most. why is Redis's reason (OOM, READONLY, or its error
// text).
func (s *Set) RefusedWrite(why string) {
	s.cfg.Stats.WritesRefused.Add(1)
	s.seen(errprefix.Errorf(errprefix.Corral, "%w (%s)", s.cfg.WriteRefused, why))
	if s.refused.Allow() {
		s.cfg.Logger.Warn("corral: Redis refuses writes; serving what it holds, loading misses directly (kept in memory for FailSafe.Throttle), storing nothing", "why", why)
	}
}

// IsWrongType reports whether err is Redis's WRONGTYPE reply: a key of
// another type is at the name.
func IsWrongType(err error) bool {
	if err == nil {
		return false // before reply, which escapes: every peek asks, a hit with no error
	}
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE")
}

// Foreign warns, once a minute, that a key of another type than corral's
// hashes is at key's entry name (another program's key, or a prefix
// clash): corral takes it for no entry, and the next commit of key
// replaces it. The type is read apart (KeyType), in the background.
func (s *Set) Foreign(key, name string) {
	if !s.foreign.Allow() {
		return
	}
	s.cfg.Go(func(ctx context.Context) {
		kind, err := s.cfg.KeyType(ctx, name)
		switch {
		case err != nil:
			kind = "unknown (" + err.Error() + ")"
		case kind == "hash" || kind == "none": // replaced or gone by now: the load that followed committed
			kind = "not a hash (replaced since)"
		}
		s.cfg.Logger.Warn("corral: a key of another type is at an entry's name (another program's key, or a prefix clash): "+
			"it is taken as no entry, and the next load or Set of the key replaces it", "key", key, "name", name, "type", kind)
	})
}

// RedisError counts a failed Redis call, unless it failed because the
// caller's own context (ctx) ended. A right denied is no failure: Redis
// answered. It is logged instead, and RedisError reports true.
func (s *Set) RedisError(ctx context.Context, err error) (denied bool) {
	switch {
	case errors.Is(err, s.cfg.Permission):
		s.PermissionDenied(err)
		return true
	case ctx.Err() == nil:
		s.cfg.Stats.RedisErrors.Add(1)
	}
	return false
}

// CommitFailed counts a commit of the entry name that failed (a right
// denied is logged, and recorded for Recent), and warns of it once a
// minute at most: the load worked, its callers still get its result.
func (s *Set) CommitFailed(name string, err error) {
	s.cfg.Stats.RedisErrors.Add(1)
	s.RightMissing(err)
	s.store.Log(s.cfg.Logger, "corral: storing a load's result failed; callers still get it", "key", name, errAttr(err))
}

// NotStored warns, once a minute at most, of a load's result that could
// not be stored under name: its commit kept failing (err, the last).
func (s *Set) NotStored(name string, err error) {
	s.store.Log(s.cfg.Logger, "corral: a load's result could not be stored", "key", name, errAttr(err))
}

// ReleaseFailed counts a lease (by name) not handed back, and warns of it
// once a minute at most.
func (s *Set) ReleaseFailed(name string, err error) {
	s.cfg.Stats.RedisErrors.Add(1)
	s.release.Log(s.cfg.Logger, "corral: releasing a lease failed; it expires within LeaseTTL", "key", name, errAttr(err))
}

// RenewFailed counts a renewal of the lease name that failed, and warns of
// it once a minute at most.
func (s *Set) RenewFailed(name string, err error) {
	s.cfg.Stats.RedisErrors.Add(1)
	s.renew.Log(s.cfg.Logger, "corral: lease renewal failed; retrying on the next tick", "key", name, errAttr(err))
}

// Evicted counts a lease (its name) found missing before its deadline, by
// a renewal (which took it again) or by the commit (which stood): evicted
// by Redis under maxmemory, most likely (or lost in a failover). The
// warning about the eviction policy was given once (internal/diagnose's
// Checks); this is logged at debug level only, since a Redis short of
// memory may evict many.
func (s *Set) Evicted(name, by string) {
	s.cfg.Stats.Evictions.Add(1)
	s.cfg.Logger.Debug("corral: a lease was missing before its deadline (evicted); its holder kept it", "key", name, "by", by)
}

// Renewal counts and logs what a renewal of the lease name found, but for
// a plain renewal: a failure (err), the lease found missing and taken
// again (evicted: Stats.Evictions, logged at debug level), the lease lost
// (its load's result will not be stored: Stats.LeasesLost, and lost is
// true), or the renewal dropped as too late (it is tried again). Warnings
// come once a minute at most, each kind: a round renews thousands of
// leases at once.
func (s *Set) Renewal(name string, res wire.Renewal, err error) (lost bool) {
	switch {
	case err != nil:
		s.RenewFailed(name, err)
	case res == wire.RenewRetaken:
		s.Evicted(name, "renewal")
	case res == wire.RenewLost:
		s.cfg.Stats.LeasesLost.Add(1)
		s.lost.Log(s.cfg.Logger, "corral: lease lost during a load; its result will not be stored", "key", name)
		return true
	case res == wire.RenewLate:
		s.late.Log(s.cfg.Logger, "corral: lease renewal reached Redis too late and was dropped; retrying", "key", name)
	}
	return false
}

// FailOpen warns, once a minute at most, of a load of key run directly
// because Redis failed with err.
func (s *Set) FailOpen(key string, err error) {
	s.failOpen.Log(s.cfg.Logger, "corral: Redis failed; calling the loader directly (fail-open)", "key", key, errAttr(err))
}
