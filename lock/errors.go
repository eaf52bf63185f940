package lock

import (
	"errors"
	"strconv"
)

// Sentinel errors. Match them with errors.Is: the package wraps them with
// the lock's key and, where there is one, the cause (the caller's context
// error, the Redis error).
var (
	// ErrNotObtained is returned by Obtain when another holder has the lock
	// and the retry strategy gave up, or the context ended first (then the
	// error also matches ctx.Err(): context.DeadlineExceeded or
	// context.Canceled).
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrNotHeld is returned by Refresh, Release and TTL when the Lock's
	// token no longer holds the lock in Redis: it was released, it expired,
	// and maybe another holder has it now. Redis is left untouched. Refresh
	// also returns it once Done is closed.
	ErrNotHeld = errors.New("lock: not held")

	// ErrInvalidKey is returned by Obtain for an empty key.
	ErrInvalidKey = errors.New("lock: invalid key")

	// ErrInvalidTTL is returned by Obtain and Refresh for a TTL below
	// MinTTL, zero or negative included.
	ErrInvalidTTL = errors.New("lock: invalid ttl")

	// ErrNilClient is returned by New for a nil Redis client.
	ErrNilClient = errors.New("lock: nil Redis client")

	// ErrInvalidOptions is wrapped by the error New returns for options
	// that make no sense (a prefix with braces).
	ErrInvalidOptions = errors.New("lock: invalid options")
)

// quotedKeyMax is the most bytes of a key that errors quote.
const quotedKeyMax = 64

// quote returns key quoted for an error message: whole when short, or its
// first quotedKeyMax bytes and its length, so that a huge key does not
// make a huge error.
func quote(key string) string {
	if len(key) <= quotedKeyMax {
		return strconv.Quote(key)
	}
	return strconv.Quote(key[:quotedKeyMax]) + "... (" + strconv.Itoa(len(key)) + " bytes)"
}
