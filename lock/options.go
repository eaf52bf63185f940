package lock

import (
	"fmt"
	"strings"
	"time"
)

// DefaultPrefix is the Prefix used when Options.Prefix is empty.
const DefaultPrefix = "lock"

// MinTTL is the shortest TTL Obtain and Refresh take. A Lock's validity is
// its TTL less a clock-drift allowance of 1% and 2 ms (see Lock), so a
// shorter TTL would leave a Lock that has ended before Obtain returns it.
const MinTTL = 3 * time.Millisecond

// Options configures a Client. A nil *Options means all defaults, and the
// zero value of every field means its documented default. Clients are cheap:
// use one per set of options (say, one that waits and one that does not).
type Options struct {
	// Prefix starts every Redis name the package creates (see the package
	// doc for the layout). It must not contain '{' or '}', which would move
	// the names to another Cluster slot. Default "lock".
	Prefix string

	// Retry decides whether, and after how long, Obtain tries again while
	// another holder has the lock; Obtain also stops when its context ends.
	// Default NoRetry(): one try.
	Retry RetryStrategy

	// Watchdog makes every Lock refresh itself to its full TTL every third
	// of its TTL until it is released, so a holder may keep a lock for as
	// long as it works. A refresh that finds the lock taken, or none landing
	// before the lock's validity runs out (Redis unreachable), ends the Lock:
	// its Done channel closes. Release stops the watchdog before it returns;
	// no refresh is sent after that. Default off: the lock expires after the
	// TTL given to Obtain unless the holder calls Refresh.
	Watchdog bool
}

// withDefaults validates o and returns a copy with every zero field set to
// its default.
func (o *Options) withDefaults() (Options, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Prefix == "" {
		r.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		return Options{}, fmt.Errorf("%w: Prefix %q contains a brace; braces would change the Cluster hash slot of the lock's keys", ErrInvalidOptions, r.Prefix)
	}
	if r.Retry == nil {
		r.Retry = NoRetry()
	}
	return r, nil
}
