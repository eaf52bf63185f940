package lock

import (
	"math/rand/v2"
	"time"
)

// A RetryStrategy decides what Obtain does when another holder has the lock:
// given the number of tries made so far (1 after the first), it returns how
// long to wait before the next try, or false to give up at once with
// ErrNotObtained. Obtain never waits past the holder's remaining TTL (the
// lock is free then, unless it was refreshed) nor past its context's end.
// A RetryStrategy is called from one goroutine at a time for one Obtain,
// and may be shared by concurrent Obtains: keep it free of unguarded state.
//
// Write your own, or use NoRetry, LinearBackoff or ExponentialBackoff; wrap
// any of them in LimitRetry to bound the number of tries.
type RetryStrategy func(tries int) (wait time.Duration, retry bool)

// NoRetry makes Obtain try once: a held lock fails at once with
// ErrNotObtained. It is the default.
func NoRetry() RetryStrategy {
	return func(int) (time.Duration, bool) { return 0, false }
}

// minWait is the shortest wait LinearBackoff and ExponentialBackoff are
// built with: a shorter one would only make Obtain poll Redis in a loop.
const minWait = time.Millisecond

// LinearBackoff retries at a steady rate: each wait is drawn uniformly from
// [interval/2, 3·interval/2), so the tries average one per interval and
// contenders that started together drift apart. An interval under 1 ms
// counts as 1 ms.
func LinearBackoff(interval time.Duration) RetryStrategy {
	interval = max(interval, minWait)
	return func(int) (time.Duration, bool) {
		return interval/2 + rand.N(interval), true
	}
}

// ExponentialBackoff retries with exponential backoff and full jitter: the
// wait after try n is drawn uniformly from [0, min(maxWait, base·2^(n-1))).
// Contenders thus spread out quickly and, together, keep Redis about as busy
// as a single one (Marc Brooker, "Exponential Backoff And Jitter", AWS
// Architecture Blog, 2015). A base under 1 ms counts as 1 ms; a maxWait
// below base counts as base.
func ExponentialBackoff(base, maxWait time.Duration) RetryStrategy {
	base = max(base, minWait)
	maxWait = max(maxWait, base)
	return func(tries int) (time.Duration, bool) {
		ceil := maxWait
		if shift := tries - 1; shift >= 0 && shift < 63 && base <= maxWait>>shift {
			ceil = base << shift // at most maxWait: no overflow
		}
		return rand.N(ceil), true
	}
}

// LimitRetry makes s give up after tries tries in all (the first one
// included): LimitRetry(s, 1) never retries, nor does a nil s.
func LimitRetry(s RetryStrategy, tries int) RetryStrategy {
	if s == nil {
		s = NoRetry()
	}
	return func(n int) (time.Duration, bool) {
		if n >= tries {
			return 0, false
		}
		return s(n)
	}
}
