package corral

import "errors"

// Background refreshes. A flight served an entry still fresh that XFetch
// picked, or a stale one (stale-while-revalidate), and fetch.lua gave it
// the lease to reload it: once the flight's callers have their answer, it
// reloads the entry under that lease, and nobody waits (freshness.go).

// refresh is a background refresh under lease l (served).
type refresh struct{ l *lease }

// run reloads a key whose entry is still served (stale, or fresh and picked
// by XFetch) under the lease, after the flight has answered its callers. At
// most MaxBackgroundRefreshes run at once; past that the lease is handed
// back and the old value stays.
func (r refresh) run(c *Cache, f *flight) {
	l := r.l
	select {
	case c.refreshSlots <- struct{}{}:
		defer func() { <-c.refreshSlots }()
	default:
		c.releaseLease(f.names, l.token, releaseArgs{})
		return
	}
	c.stats.Refreshes.Add(1)
	if l.early {
		c.stats.EarlyRefreshes.Add(1)
	}
	a, next := c.loadAndCommit(f, l, true)
	if next != nil {
		next.run(c, f)
	}
	if err := a.err; err != nil && !isNotFound(err) && !errors.Is(err, ErrClosed) {
		c.stats.RefreshErrors.Add(1)
		c.opts.Logger.Warn("corral: background refresh failed; the current value stays", "key", f.key, errAttr(err))
	}
}
