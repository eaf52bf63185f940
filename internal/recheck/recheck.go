// Package recheck paces a waiter: a flight that waits for another
// process's lease on its key, and asks Redis again (fetch.lua) when no
// notice came in time. It says how long to wait for a notice (After), how
// often to poll when no notice can be heard (Poll), and how often to try
// again while Redis fails (Failed).
//
// It knows durations and random draws, nothing else: the draws are its
// caller's (Options.Rand), and what a waiter listens to, and when it gives
// up, are the root's.
package recheck

import "time"

// Failed is how often a waiter whose re-check failed tries again.
const Failed = 250 * time.Millisecond

// After is how long a waiter waits for a notice before fetching again:
// the lease's remaining time pttl, at most leaseTTL, plus up to a quarter
// of it at random (r, in [0, 1)), so waiters of many processes do not
// re-check together. Notices, not this timer, are how waiters normally
// wake.
func After(pttl, leaseTTL time.Duration, r float64) time.Duration {
	d := min(max(pttl, time.Millisecond), leaseTTL)
	return d + time.Duration(r*float64(d/4+time.Millisecond))
}

// Poll is how long a waiter that cannot hear its lease holder waits before
// its re-check number n (from 0): 25 ms, doubling up to 200 ms, plus up to
// 50 ms at random (r, in [0, 1)). So a commit is seen within 250 ms, and a
// waiting key costs each process at most about 4 fetches a second: Redis
// traffic grows with the number of processes waiting, not callers.
func Poll(n int, r float64) time.Duration {
	d := pollMax
	if n < 4 {
		d = min(pollMin<<n, pollMax)
	}
	return d + time.Duration(r*float64(pollJitter))
}

const (
	pollMin    = 25 * time.Millisecond
	pollMax    = 200 * time.Millisecond
	pollJitter = 50 * time.Millisecond
)
