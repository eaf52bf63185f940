// Package warn owns a Cache's warnings of what Redis refused (a right, a
// write, a notice, a commit, a lease's hand-back or renewal), of keys in
// the way and of entries that do not decode: what each counts and says
// (Set), and the bookkeeping that keeps a Redis in trouble from flooding
// the log: whether one may be logged now (once a minute at most,
// Minutely) and whether it was logged already (once per key or message, in
// bounded memory, Keys). A Set also keeps the latest fault that leaves
// Redis answering (a right denied, writes refused), for the Cache's Health.
//
// It may not touch when a warning is warranted: the root calls it, and
// tells it the errors it tells apart (Config). It counts only into the
// counters it is given, and reads Redis only through Config.KeyType, in the
// background through Config.Go.
package warn

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Minutely lets a warning through once a minute. Its zero value lets the
// first one through.
type Minutely struct{ last atomic.Int64 }

// Allow reports whether the warning may be logged now, and if so, starts
// the next minute.
func (m *Minutely) Allow() bool {
	now := time.Now().UnixNano()
	last := m.last.Load()
	return now-last >= int64(time.Minute) && m.last.CompareAndSwap(last, now)
}

// Log logs msg through log at warn level once a minute at most, and at
// debug level otherwise: for what can happen on every call while Redis is
// in trouble.
func (m *Minutely) Log(log *slog.Logger, msg string, args ...any) {
	if m.Allow() {
		log.Warn(msg, args...)
		return
	}
	log.Debug(msg, args...)
}

// MaxKeys bounds the keys a Keys remembers, over all its sets.
const MaxKeys = 10000

// Keys counts the keys remembered by the sets of once-per-key warnings
// that share it.
type Keys struct{ n atomic.Int64 }

// Once reports whether key is new to seen (and records it): a warning once
// per key. The sets sharing k keep at most MaxKeys keys; past that, seen
// forgets its keys and every key counts as new again, so memory stays
// bounded.
func (k *Keys) Once(seen *sync.Map, key string) bool {
	if _, ok := seen.Load(key); ok {
		return false
	}
	if k.n.Add(1) > MaxKeys {
		seen.Clear()
		k.n.Store(0)
	}
	_, loaded := seen.LoadOrStore(key, true)
	return !loaded
}
