package corral

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/corralhq/corral/internal/fill"
)

// Options configures a Cache. A nil *Options means all defaults, and the zero
// value of every field means its documented default. Features that are on by
// default are turned off with an explicit Disable… field.
type Options struct {
	// Prefix starts every Redis name corral creates (see the package doc
	// for the layout). It must not contain '{' or '}'. Default "corral".
	Prefix string

	// LeaseTTL is how long a load's lease lives in Redis without renewal.
	// A watchdog renews it at most 3LeaseTTL/8 after its grant or last renewal
	// while the load runs (one round for all of a Cache's leases), so loads may
	// take longer; if the loading process dies, another process takes over
	// within LeaseTTL. Default 5s; at least 30ms.
	LeaseTTL time.Duration

	// LoadTimeout bounds one run of a loader. The load runs detached from
	// its callers (context.WithoutCancel of the first caller's context), so
	// one caller giving up never cancels it for the others; LoadTimeout is
	// what stops it. Past it the flight's callers get ErrLoadTimeout, the
	// lease is released and the loader's late result is discarded.
	// Default 10s.
	LoadTimeout time.Duration

	// RedisTimeout is how long Redis may stay silent on a call before corral
	// treats it as failing (the stall bound): the call fails with
	// ErrRedisTimeout, the node is found down (its breaker trips), and Fetch
	// answers from memory or fails open. A call unanswered for 100 ms (at
	// most RedisTimeout/2), its node silent as long, has the node probed (a
	// PING on a connection corral keeps for that, whose answer is read
	// straight off the socket, so a client starved of CPU is not taken for a
	// silent Redis); past its bound, the call fails once that probe has gone
	// unanswered for the rest of the bound. So when Redis falls silent, a
	// call fails RedisTimeout after it was sent, plus at most a monitor tick
	// (25 ms, at most RedisTimeout/4), and later calls at once. It starts
	// when the call is sent: time a call spends queued in corral's pipeline
	// (see the package doc) does not count, and a call that carries a value
	// (a commit, the read of a large entry) is allowed one more second per
	// 8 MiB for the transfer. A Redis that refuses or resets the connection,
	// or closes it unanswered, fails the call at once, whatever the client's
	// own retries; a new connection that does not open within the client's
	// DialTimeout is tried again. "Not now" replies (LOADING, BUSY, TRYAGAIN,
	// CLUSTERDOWN, MASTERDOWN) are tried again for up to RedisTimeout. A node
	// that answered anything (a PING probe included) since is alive, only
	// slow: its calls wait on, up to 10 RedisTimeouts in all (time in which
	// this process's goroutines waited long for a CPU does not count, up to
	// 30 in all), before they fail. So a pause of a live Redis shorter than
	// RedisTimeout costs waiting, never an extra load. Every call is bounded
	// so whatever the client's own timeouts; keep the client's ReadTimeout
	// and WriteTimeout long enough for the largest value's transfer. A Fetch
	// whose own deadline comes before the verdict, and whose node has said
	// nothing since the call began, fails open before its deadline instead
	// of timing out (see the README's "When Redis is slow, and when it
	// fails"). Default 2s.
	RedisTimeout time.Duration

	// MaxValueBytes is the largest value, in bytes, that corral stores
	// (counted before compression). A loaded value over it is returned to
	// the callers of that load but not stored (Stats.ValuesTooLarge counts
	// it, and a warning is logged once per key); callers in other processes
	// then run the loader themselves. Since nothing is stored, every later
	// Fetch of that key loads again (one load per process at a time): such
	// a key has no stampede protection across the fleet: raise the limit
	// for keys that need it. Set returns ErrValueTooLarge for it. Default
	// 64 MiB.
	MaxValueBytes int

	// Compress stores values of at least CompressMinBytes compressed with S2
	// (github.com/klauspost/compress/s2), when that makes them smaller.
	// Compressed entries keep their payload in field z instead of v, so a
	// release of corral without compression sees no entry (a miss) rather
	// than compressed bytes. Default off.
	Compress bool

	// CompressMinBytes is the size, in bytes, from which Compress compresses
	// a value. Default 16 KiB.
	CompressMinBytes int

	// StaleTTL is the stale-while-revalidate window (RFC 5861): how long an
	// entry is kept, and served, after its soft TTL has passed, while the
	// first caller to see it refreshes it in the background; nobody waits.
	// The entry's Redis TTL (the hard TTL) is the soft TTL plus StaleTTL.
	// With a stale window, refreshes happen at the soft expiry, one per TTL,
	// and early refresh is not used. Default 0: no stale window.
	StaleTTL time.Duration

	// Beta scales early refresh (XFetch, Vattani, Chierichetti and
	// Lowenstein, "Optimal Probabilistic Cache Stampede Prevention",
	// VLDB 2015), which keeps callers of an entry without a stale window
	// from ever waiting at its expiry: each Fetch of a fresh entry with r
	// left before its soft expiry, whose last load took d, refreshes it in
	// the background with probability exp(-r/(d*Beta)). Larger is earlier.
	// Under heavy traffic the first early refresh comes about
	// d*Beta*ln(requests per d) before expiry: negligible for TTLs much
	// longer than that, a visible extra load per TTL for very short ones.
	// Not used when StaleTTL is set, nor for an entry with a stale window of
	// its own (Entry.StaleTTL). Default 1.
	Beta float64

	// DisableEarlyRefresh turns XFetch off: entries are refreshed only once
	// their soft TTL has passed.
	DisableEarlyRefresh bool

	// NegativeTTL is how long an ErrNotFound from a loader is cached
	// (negative caching). Default 10s.
	NegativeTTL time.Duration

	// ErrorTTL, when set, caches a load's failure (an error other than
	// ErrNotFound, a panic, or LoadTimeout) for this long, so a failing
	// origin is not hammered: until it expires, Fetch returns an error
	// wrapping ErrCachedFailure with the failure's message, without loading.
	// For a failed background refresh it is the backoff: the stale value
	// keeps being served (stale-if-error, RFC 5861) and no refresh is tried
	// for ErrorTTL. Default 0: failures are not cached, and the next caller
	// that sees the stale entry retries the refresh (still one at a time
	// across the fleet).
	ErrorTTL time.Duration

	// Jitter spreads each write's soft TTL uniformly by ±Jitter (a fraction
	// of the TTL, in [0, 1)), so keys written together do not expire
	// together. Default 0.1 (±10%).
	Jitter float64

	// DisableJitter writes every soft TTL exactly as given.
	DisableJitter bool

	// Codec encodes the values of the typed Fetch[T]. Default JSON.
	Codec Codec

	// CodecVersion is stored with every entry written (field c). Raise it
	// when what Fetch[T] stores changes shape (a new field type, a new
	// codec): Fetch[T] then takes an entry of an older version as missing,
	// reloads it once (one load per key, under the lease as usual) and
	// stores it anew; one of a newer version, written by a newer release
	// during a rolling deploy, it loads without storing, leaving it to the
	// newer release, and keeps what it loaded in the process while that
	// entry stays the same. So a rolling deploy costs one reload per key by
	// the newer release, plus one load per key per older process per refresh
	// of the newer entry. Cache.Fetch ([]byte) takes entries of any
	// version. Default 0.
	CodecVersion int

	// Logger receives warnings (lost leases, failed commits and renewals)
	// and debug events. Default slog.Default().
	Logger *slog.Logger

	// NoticeInlineLimit is the largest value, in bytes, that a completion
	// notice carries inline, so waiters in other processes skip a round
	// trip. Larger values are announced without the payload and waiters
	// read them from the entry. Every subscriber of a key receives the
	// notice: a burst of many large inline values could exceed Redis's
	// client-output-buffer-limit for pub/sub and get subscribers dropped,
	// which a small limit keeps from happening. Default 1024 (1 KiB).
	NoticeInlineLimit int

	// MaxBackgroundRefreshes bounds the refreshes one Cache runs in the
	// background for stale-while-revalidate and early refresh. When the
	// bound is reached, further refreshes are skipped (the lease is handed
	// back) and the current value is still served. Default 64.
	MaxBackgroundRefreshes int

	// DisableFailOpen makes Fetch return Redis errors (wrapped) instead of
	// calling the loader directly when Redis fails.
	DisableFailOpen bool

	// FailSafe configures what a Cache serves from its own memory while it
	// cannot use Redis for a call (Redis refuses connections, is silent
	// past RedisTimeout, refuses the client's AUTH, or its breaker is
	// open), instead of calling the loader: near-cache copies up to
	// FailSafe.TTL, and what fail-open loads returned, so that each key
	// costs at most one origin load per process per FailSafe.Throttle
	// while Redis stays away. See FailSafeOptions.
	FailSafe FailSafeOptions

	// MaxPendingInvalidations bounds the invalidations (Deletes and Sets)
	// that could not reach Redis, kept to be applied once it answers; past
	// it, a new one is dropped (Stats.InvalidationsDropped, a warning).
	// Default 10,000.
	MaxPendingInvalidations int

	// DisableFailSafe serves nothing from memory when Redis cannot be used:
	// every fail-open flight calls the loader, and near copies are hits
	// only (within NearCache.TTL), as before fail-safe existed.
	DisableFailSafe bool

	// BreakerThreshold is how many exchanges in a row with a Redis node
	// must fail (time out, lose or be refused their connection) before the
	// node's circuit breaker opens and skips it for BreakerCooldown. A "not
	// now" reply to a command (LOADING, BUSY, CLUSTERDOWN, ...) is retried
	// within RedisTimeout rather than counted; refused writes (OOM,
	// READONLY) and missing rights (NOPERM) are not failures. Default 5.
	BreakerThreshold int

	// BreakerCooldown is how long the circuit breaker, opened after
	// BreakerThreshold failures, skips Redis before it lets one probe call
	// through; each breaker spreads it by ±25%. (A node found down at once,
	// refused, silent or refusing AUTH, is skipped until its own recovery
	// probe answers instead.) Default 2s.
	BreakerCooldown time.Duration

	// DisableBreaker sends every call to Redis, however often Redis fails,
	// and whatever it refuses: no breaker opens, either way.
	DisableBreaker bool

	// DisableShardedPubSub makes corral use PUBLISH/SUBSCRIBE even on Redis
	// 7+, where it otherwise uses sharded SPUBLISH/SSUBSCRIBE. Servers
	// without sharded pub/sub are detected and use the plain commands anyway.
	// Every instance sharing a Redis must agree on it: notices published
	// one way are not heard by waiters subscribed the other way.
	DisableShardedPubSub bool

	// Observer, when set, is told of each call's outcome, of loads and
	// waits with their durations, and of lost leases, rejected commits and
	// the circuit breaker's changes of state, at the points where Stats
	// counts them (see Observer and EventKind). A Tracer is also told where
	// each Fetch call and each load begin and end, and gives them their
	// contexts. Adapters: corralprom (Prometheus), corralotel
	// (OpenTelemetry); MultiObserver combines several. Default nil: nothing
	// is told, and the hit path pays a nil check.
	Observer Observer

	// NearCache turns on, and configures, an in-process cache in front of
	// Redis: hits served from memory, kept coherent across the fleet by
	// Redis's server-assisted client-side caching (see the package doc).
	// The zero value (Size 0) leaves it off.
	NearCache NearCacheOptions

	// Rand returns uniform random numbers in [0, 1) for XFetch and jitter.
	// It must be safe for concurrent use. Tests inject it; default
	// math/rand/v2.Float64.
	Rand func() float64
}

// Defaults of Options, as documented on each field.
const (
	DefaultPrefix                 = "corral"
	DefaultLeaseTTL               = 5 * time.Second
	DefaultLoadTimeout            = 10 * time.Second
	DefaultRedisTimeout           = 2 * time.Second
	DefaultMaxValueBytes          = 64 << 20
	DefaultCompressMinBytes       = 16 << 10
	DefaultBeta                   = 1.0
	DefaultNegativeTTL            = 10 * time.Second
	DefaultJitter                 = 0.1
	DefaultNoticeInlineLimit      = 1 << 10
	DefaultMaxBackgroundRefreshes = 64
	DefaultBreakerThreshold       = 5
	DefaultBreakerCooldown        = 2 * time.Second
)

// withDefaults validates o and returns a copy with every zero field set to
// its default. What each field must be is internal/fill's (fill.Options).
func (o *Options) withDefaults() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if err := fill.Options(&r, defaults()); err != nil {
		return Options{}, errorf("%w: %v", ErrInvalidOptions, err)
	}
	return r, nil
}

// defaults is an Options of every field's default, as its doc says.
func defaults() Options {
	return Options{
		Prefix: DefaultPrefix, LeaseTTL: DefaultLeaseTTL, LoadTimeout: DefaultLoadTimeout,
		RedisTimeout: DefaultRedisTimeout, NegativeTTL: DefaultNegativeTTL, BreakerCooldown: DefaultBreakerCooldown,
		Beta: DefaultBeta, Jitter: DefaultJitter, NoticeInlineLimit: DefaultNoticeInlineLimit,
		MaxBackgroundRefreshes: DefaultMaxBackgroundRefreshes, BreakerThreshold: DefaultBreakerThreshold,
		MaxValueBytes: DefaultMaxValueBytes, CompressMinBytes: DefaultCompressMinBytes,
		MaxPendingInvalidations: DefaultMaxPendingInvalidations,
		FailSafe: FailSafeOptions{TTL: DefaultFailSafeTTL, Throttle: DefaultFailSafeThrottle,
			Size: DefaultFailSafeSize, MaxBytes: DefaultFailSafeMaxBytes},
		NearCache: NearCacheOptions{TTL: DefaultNearCacheTTL},
		Codec:     JSONCodec{}, Logger: slog.Default(), Rand: rand.Float64,
	}
}
