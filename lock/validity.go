package lock

import (
	"context"
	"time"
)

// How long a Lock holds: the validity timer, which ends the Lock when its
// TTL is nearly over, and the watchdog, which refreshes the lock in Redis
// and moves the validity on.

// validity is how long after sending the request that set a lock's TTL the
// lock surely still holds, clock drift allowed for.
func validity(ttl time.Duration) time.Duration {
	return ttl - ttl/100 - 2*time.Millisecond
}

// watch is the watchdog: it refreshes the lock every third of its TTL until
// ctx is cancelled (Release) or the Lock ends. A refresh that fails on a
// Redis error is tried again on the next tick; if none lands in time, the
// validity timer ends the Lock.
func (l *Lock) watch(ctx context.Context) {
	defer close(l.watching)
	tick := time.NewTicker(max(l.ttl/3, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-tick.C:
		}
		sent := time.Now()
		l.mu.Lock()
		until := l.deadline
		l.mu.Unlock()
		rctx, cancel := context.WithDeadline(ctx, until) // no use after the validity
		ok, err := l.refresh(rctx, l.ttl)
		cancel()
		switch {
		case err != nil:
			continue
		case !ok:
			l.end()
			return
		default:
			l.extend(sent, l.ttl)
		}
	}
}

// halt stops the watchdog, if any, and waits until it has returned,
// including a refresh it had in flight.
func (l *Lock) halt() {
	if l.stop == nil {
		return
	}
	l.haltOnce.Do(func() {
		l.stop()
		<-l.watching
	})
}

// extend moves the validity to start at sent, when a refresh sent then to
// ttl has landed. It reports false if the Lock has ended.
func (l *Lock) extend(sent time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return false
	}
	if sent.Before(l.basis) {
		return true // a later request has set the TTL already
	}
	l.basis, l.deadline = sent, sent.Add(validity(ttl))
	l.timer.Reset(time.Until(l.deadline))
	return true
}

// lapse runs when the validity timer fires: the Lock ends unless a refresh
// has moved the validity on meanwhile.
func (l *Lock) lapse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if left := time.Until(l.deadline); left > 0 {
		l.timer.Reset(left)
		return
	}
	l.endLocked()
}

func (l *Lock) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked()
}

func (l *Lock) endLocked() {
	if l.ended {
		return
	}
	l.ended = true
	l.timer.Stop()
	close(l.done)
}

func (l *Lock) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}
