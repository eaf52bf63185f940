package corral

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/failopen"
)

// SetOnParked has f called whenever a waiter of c is about to wait for a
// notice it can hear (its subscription confirmed, the holder on the same
// kind of pub/sub): until the notice or its lease timer, it sends nothing.
// Set it before c's first Fetch.
func SetOnParked(c *Cache, f func(channel string)) { c.onParked = f }

// RunsFailOpen is IsFailOpen for tests: it does not record that the loader
// asked (which keeps its result from being committed under a lease).
func RunsFailOpen(ctx context.Context) bool {
	return failopen.MarkOf(ctx) != nil
}

// serverDeadline estimates the server clock at local time now plus slack,
// never ahead of the server (watchdog.ServerAt): the deadline of a renewal
// sent now, for the store's tests (the watchdog computes its own).
func (l *lease) serverDeadline(slack time.Duration) int64 {
	return l.serverAt(time.Now().Add(slack))
}

// PeekCallers returns how many callers wait for key's peek on c (a Fetch's
// peek, which hands them over to the key's flight).
func PeekCallers(c *Cache, key string) int { return c.peeks.Callers(key) }

// WarmedUp is closed once c's warm-up (New's background work) is done.
func WarmedUp(c *Cache) <-chan struct{} { return c.warmed }

// PubSubKnown reports whether c has learnt its pub/sub mode (Ready).
func PubSubKnown(c *Cache) bool {
	_, ok := c.store.mode.Known()
	return ok
}
