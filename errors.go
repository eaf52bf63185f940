package corral

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/corralhq/corral/internal/diagnose"
	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/transport"
)

// Sentinel errors. Match them with errors.Is: corral wraps them with context
// (the key, the Redis error, the caller's context error). ErrClosed,
// ErrRedisTimeout and ErrCircuitOpen are internal/transport's, and
// ErrCheckFailed internal/diagnose's, the same values. Every error corral
// returns says "corral: " once, at the front of its text, however many of
// corral's errors it wraps (errorf).
var (
	// ErrNotFound is what a loader returns, or wraps, to say "no such
	// record". Fetch caches it as a negative entry for Options.NegativeTTL
	// and returns it to every caller until that entry expires. It is never
	// confused with an empty value.
	ErrNotFound = errors.New("corral: not found")

	// ErrMiss is returned by Get when the key has no entry.
	ErrMiss = errors.New("corral: cache miss")

	// ErrClosed is returned by every method called after Close, and by
	// calls that Close interrupted.
	ErrClosed = transport.ErrClosed

	// ErrInvalidKey is returned for an empty key (by FetchMany, in its
	// *BatchError, for that key alone).
	ErrInvalidKey = errors.New("corral: invalid key")

	// ErrInvalidTag is returned by InvalidateTags and ExpireTags without
	// tags, and for a tag that is empty or holds a NUL byte (there, and in
	// Entry.Tags).
	ErrInvalidTag = errors.New("corral: invalid tag")

	// ErrInvalidTTL is returned for a ttl that is zero or negative.
	ErrInvalidTTL = errors.New("corral: invalid ttl")

	// ErrNilLoader is returned by Fetch when load is nil, and by FetchMany
	// when loadMany is nil.
	ErrNilLoader = errors.New("corral: nil loader")

	// ErrInvalidOptions is wrapped by the error New returns for options
	// that make no sense (a prefix with braces, a negative duration, ...).
	ErrInvalidOptions = errors.New("corral: invalid options")

	// ErrLoadTimeout is returned to the callers of a load that ran past
	// Options.LoadTimeout. It is joined with context.DeadlineExceeded.
	ErrLoadTimeout = errors.New("corral: load timed out")

	// ErrCachedFailure is wrapped by the error Fetch returns while a load's
	// failure is cached (Options.ErrorTTL). The error text carries the
	// failure's message.
	ErrCachedFailure = errors.New("corral: a recent load failed")

	// ErrRedisTimeout is wrapped by the error of a Redis call that got no
	// reply within Options.RedisTimeout of being sent (plus its transfer
	// time). It is not context.DeadlineExceeded: the caller's own context may
	// have plenty of time left. The error also names the latest error Redis
	// calls got, when there was one.
	ErrRedisTimeout = transport.ErrRedisTimeout

	// ErrCircuitOpen is wrapped by the errors of Redis calls that the circuit
	// breaker skipped because Redis kept failing. Fetch fails open instead
	// (unless DisableFailOpen); Get, Set and Delete return it.
	ErrCircuitOpen = transport.ErrCircuitOpen

	// ErrValueTooLarge is returned by Set for a value over
	// Options.MaxValueBytes. (Fetch hands such a value to its callers without
	// storing it.)
	ErrValueTooLarge = errors.New("corral: value too large")

	// ErrWriteRefused is wrapped by the error of a write Redis refused while
	// it still answers reads: out of memory under maxmemory-policy
	// noeviction (OOM), or a replica (READONLY). Fetch then serves what Redis
	// holds and loads only misses directly (fail-open, each kept in memory
	// for FailSafe.Throttle, so at most one load per key per process per
	// Throttle); Set returns it (and the invalidation is queued for Redis).
	ErrWriteRefused = errors.New("corral: Redis refuses writes")

	// ErrPermission is wrapped, with Redis's NOPERM error naming the missing
	// right, by the error of a call Redis denied: the ACL user lacks a
	// command (EVALSHA, HMGET, ...) or a key pattern corral needs (see the
	// README's ACL rule). Fetch returns it rather than calling the loader
	// (which would load on every call); Get, Set and Delete return it. It
	// is not a breaker failure. Missing channel rights are not an error:
	// waiters then re-check on their own (see Options.LeaseTTL).
	ErrPermission = errors.New("corral: permission denied by Redis ACL")

	// ErrQueued is wrapped by the error of an invalidation (Delete, Set,
	// Expire, InvalidateTags, ExpireTags, Clear) that could not reach Redis:
	// it is queued, applied once Redis answers, and until then this process
	// serves nothing it concerns from Redis.
	ErrQueued = errors.New("corral: queued: applied once Redis answers")

	// ErrCheckFailed is wrapped by Report.Err when Check found something
	// that would break a guarantee of corral's (a Finding of
	// SeverityFailure); the error names each such finding. It is
	// internal/diagnose's, the same value.
	ErrCheckFailed = diagnose.ErrCheckFailed

	// ErrRemoteLoad is wrapped by the error returned to callers that waited
	// on a load run by another process when that load failed. The error
	// text carries the remote error's message; its type is not preserved.
	ErrRemoteLoad = errors.New("corral: remote load failed")
)

// PanicError is the error every caller of a flight gets when the loader
// panicked. The lease is released and nothing is stored.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the loader goroutine's stack at the panic
}

func (e *PanicError) Error() string {
	v := e.Value
	if err, ok := v.(error); ok {
		v = bare(err)
	}
	return fmt.Sprintf(errPrefix+"loader panicked: %v\n\n%s", v, e.Stack)
}

// Unwrap returns the panic value when it is an error, so errors.Is and
// errors.As see through the panic.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// errPrefix begins the text of every error corral returns, once. errorf is
// fmt.Errorf for corral's errors, and the only way the package makes one
// other than a sentinel: errPrefix, then format, with each error among args
// said without its own errPrefix (internal/errprefix), so that "corral:
// fetch: " wrapping the pipeline's "corral: Redis unreachable: ..." says
// "corral: " once. errors.Is and errors.As see every error wrapped with %w.
// bare says err without errPrefix, for text that puts it after corral's
// own words (a Finding's Detail, a log record's), bareText the text of an
// error that came as a string (a remote or cached failure), and errAttr is
// a log record's "err" attribute, whose message says errPrefix already.
const errPrefix = errprefix.Corral

func errorf(format string, args ...any) error { return errprefix.Errorf(errPrefix, format, args...) }
func bare(err error) error                    { return errprefix.Trim(errPrefix, err) }
func bareText(s string) string                { return errprefix.TrimText(errPrefix, s) }
func errAttr(err error) slog.Attr             { return errprefix.Attr(errPrefix, err) }

// redisFailed reports whether err says Redis is unavailable
// (transport.Unavailable: refused, silent, the breaker open, a "not now"
// reply, refused credentials), and not merely that Redis answered with an
// entry that does not decode (errBadEntry).
func redisFailed(err error) bool {
	return transport.Says(err, transport.Unavailable) && !errors.Is(err, errBadEntry)
}

// errBadEntry is wrapped by the error of a fetch whose entry does not decode
// (a corrupt compressed payload, one over MaxValueBytes): the entry is to be
// taken as missing, not Redis as failing.
var errBadEntry = errors.New("corral: the entry does not decode")
