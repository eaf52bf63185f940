package transport

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// What an error says of Redis. Every "is Redis down?" in corral is asked
// here: the pipeline's retries and trips, the breakers, the Cache's
// fail-open and queued invalidations, the pub/sub probe and Check. An error
// is either a reply (Redis answered the one command with an error: replies,
// below, say what each kind of reply means) or the exchange's failure (a
// connection refused, reset or silent, the breaker open), which says Redis
// is unavailable unless the caller left.

// Class is what an error says of Redis: a set of flags.
type Class uint32

const (
	// Reply: an error reply to one command (Redis answered it; the other
	// commands of a pipeline are answered too).
	Reply Class = 1 << iota
	// NotNow: a reply by which a live Redis says "not now": it is loading
	// its data, busy with a script, failing over, or the key's slot is
	// moving. The op is sent again within the timeout.
	NotNow
	// Moved: the key's slot moved (MOVED, ASK): the slot map is stale.
	Moved
	// Unavailable: Redis cannot be used for now: a network error, a
	// timeout, the breaker open, a "not now" reply other than a moved slot
	// (and NOREPLICAS), or refused credentials. Other replies mean Redis is
	// up and answering: among them a refused write (OOM, READONLY), with
	// which Redis still serves reads. A caller that left is nobody's
	// failure.
	Unavailable
	// AuthRefused: Redis refuses the client's credentials: a wrong password
	// or user (WRONGPASS; "invalid password" from Redis before 6), or none
	// given where one is needed (NOAUTH).
	AuthRefused
	// ClientRefused: a reply refusing the client rather than a command,
	// at connection set-up: its credentials (AuthRefused, or AUTH sent to a
	// server without a password) or its database index.
	ClientRefused
	// NoScript: the server lacks the script (EVALSHA).
	NoScript
	// Denied: the ACL user may not run the command or touch the key:
	// NOPERM, or what a script gets for a command it may not run.
	Denied
	// WriteRefused: Redis refuses to write while it serves reads: out of
	// memory under noeviction (OOM), or a replica (READONLY).
	WriteRefused
	// Unreachable: Redis could not be reached at all (a connection refused
	// or not made), rather than failing after a command was sent.
	Unreachable
	// RefusedDial: a connection the server refused (or reset) as it was
	// made: not one that timed out, nor one this process cancelled (a
	// trip's cut-off, Close), whose late report says nothing of the server.
	RefusedDial
	// DialTimeout: the client did not see a new connection open in time
	// (nothing was sent; not a refusal, which is an answer).
	DialTimeout
	// ReadTimeout: the client's read deadline ran out before a reply was
	// read whole.
	ReadTimeout
	// Timeout: any I/O timing out (a read with no message yet).
	Timeout
	// CallerGone: the op's caller left (its context ended) before the op
	// was answered.
	CallerGone
)

// replies says what each error reply means, by the start of its text.
var replies = [...]struct {
	prefix string
	class  Class
}{
	{"LOADING", NotNow | Unavailable},
	{"BUSY", NotNow | Unavailable},
	{"TRYAGAIN", NotNow | Unavailable},
	{"CLUSTERDOWN", NotNow | Unavailable},
	{"MASTERDOWN", NotNow | Unavailable},
	{"MOVED", NotNow | Moved},
	{"ASK", NotNow | Moved},
	{"NOREPLICAS", Unavailable},
	{"WRONGPASS", Unavailable | AuthRefused | ClientRefused},
	{"NOAUTH", Unavailable | AuthRefused | ClientRefused},
	{"ERR invalid password", Unavailable | AuthRefused | ClientRefused},
	{"ERR invalid username-password", Unavailable | AuthRefused | ClientRefused},
	{"ERR AUTH", ClientRefused},
	{"ERR DB index", ClientRefused},
	{"ERR invalid DB index", ClientRefused},
	{"NOSCRIPT", NoScript},
	{"NOPERM", Denied},
	{"OOM", WriteRefused},
	{"READONLY", WriteRefused},
}

// scriptDenied is in the error a script gets for a command the ACL user
// may not run.
const scriptDenied = "user executing the script can't"

// Classify returns what err says of Redis; 0 for nil.
func Classify(err error) Class {
	if err == nil {
		return 0
	}
	var c Class
	var reply redis.Error
	var gone callerGone
	switch {
	case errors.As(err, &gone):
		c = CallerGone
	case errors.As(err, &reply):
		c = Reply | ClassifyReply(reply.Error())
	default:
		c = Unavailable
	}
	return c | classifyNet(err)
}

// ClassifyReply returns what the text of an error reply says of Redis (a
// reply that came as a string: a script's caught error, say). Reply itself
// is not among the flags.
func ClassifyReply(msg string) Class {
	var c Class
	for _, r := range replies {
		if strings.HasPrefix(msg, r.prefix) {
			c |= r.class
		}
	}
	if strings.Contains(msg, scriptDenied) {
		c |= Denied
	}
	return c
}

// classifyNet returns the flags of err as a connection's failure.
func classifyNet(err error) Class {
	var c Class
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		c |= Timeout
	}
	var op *net.OpError
	if errors.As(err, &op) {
		switch {
		case op.Op == "dial" && op.Timeout():
			c |= DialTimeout
		case op.Op == "read" && op.Timeout():
			c |= ReadTimeout
		}
	}
	var u unreachableError
	if errors.As(err, &u) || op != nil && op.Op == "dial" {
		c |= Unreachable
		if c&DialTimeout == 0 && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			c |= RefusedDial
		}
	}
	return c
}

// Says reports whether err says any of c (Classify).
func Says(err error, c Class) bool { return Classify(err)&c != 0 }

// Refused wraps err with permission when it is Redis refusing a command or
// key to the ACL user (Denied: NOPERM, or the error a script gets for a
// command it may not run), and with writeRefused when Redis refuses to
// write (WriteRefused: OOM, READONLY). Other errors, nil included, are
// returned as they are. The root passes its ErrPermission and
// ErrWriteRefused.
func Refused(err, permission, writeRefused error) error {
	switch c := Classify(err); {
	case c&Reply == 0:
		return err
	case c&Denied != 0:
		return errorf("%w: %w", permission, err)
	case c&WriteRefused != 0:
		return errorf("%w: %w", writeRefused, err)
	}
	return err
}
