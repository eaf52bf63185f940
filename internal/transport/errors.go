package transport

import (
	"errors"
	"log/slog"

	"github.com/corralhq/corral/internal/errprefix"
)

// The transport's sentinel errors. The root package re-exports them by value
// (corral.ErrClosed = transport.ErrClosed), so errors.Is matches them across
// the boundary; their documentation for users is there.
var (
	// ErrClosed fails every op sent after Close, and the ops Close found
	// queued.
	ErrClosed = errors.New("corral: cache closed")

	// ErrRedisTimeout is wrapped by the error of an op whose batch got no
	// reply within the timeout of being sent (plus its transfer time).
	ErrRedisTimeout = errors.New("corral: Redis silent past RedisTimeout")

	// ErrCircuitOpen is wrapped by the error of an op that a node's circuit
	// breaker kept from Redis.
	ErrCircuitOpen = errors.New("corral: Redis unavailable, circuit breaker open")
)

// errTripped marks an exchange the trip kept from Redis after gobreaker let
// it through: not counted by gobreaker.
var errTripped = errors.New("corral: not sent: the node's breaker tripped")

// errorf is fmt.Errorf for the transport's errors: "corral: " once, at the
// front (internal/errprefix).
func errorf(format string, args ...any) error {
	return errprefix.Errorf(errprefix.Corral, format, args...)
}

// bare returns err said without "corral: ", for text that puts it after
// words of its own.
func bare(err error) error { return errprefix.Trim(errprefix.Corral, err) }

// errAttr is the "err" attribute of a log record, whose message says
// "corral: " already.
func errAttr(err error) slog.Attr { return errprefix.Attr(errprefix.Corral, err) }

// unreachableError is the error of a batch sent to a node that refuses
// connections.
type unreachableError struct{ err error }

func (e unreachableError) Error() string {
	return errprefix.Corral + "Redis unreachable: " + bare(e.err).Error()
}
func (e unreachableError) Unwrap() error { return e.err }

// callerGone wraps the error of an op abandoned because its caller's
// context ended: not a failure of Redis.
type callerGone struct{ err error }

func (e callerGone) Error() string { return e.err.Error() }
func (e callerGone) Unwrap() error { return e.err }

// tripErr is the error of a batch a trip failed: err, which callers see,
// marked errTripped for gobreaker, which does not count it.
type tripErr struct{ err error }

func (e tripErr) Error() string   { return e.err.Error() }
func (e tripErr) Unwrap() []error { return []error{e.err, errTripped} }

// serverRefused is the error of a connection the server refused with msg.
type serverRefused string

func (e serverRefused) Error() string {
	if _, full := MaxClients(string(e)); full {
		return "Redis refused the connection: " + string(e) + ": " + MaxClientsFix
	}
	return "Redis refused the connection: " + string(e)
}
