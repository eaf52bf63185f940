package epochs

import (
	"context"
	"time"
)

// The records' clock: when a load begins, on the clock its entry's born
// is compared on.

// synced keeps now, the records' node's clock (µs) in a reply that just
// arrived, for Born.
func (m *Mirror) synced(now int64) {
	m.clock.Store(&sync_{server: now, local: m.cfg.Now()})
}

// BornAt is when a load whose lease was granted at grant (server µs on
// the entry's node; 0 for a Set, which has none) begins on the records'
// clock: grant itself on one node (0: the commit's own clock, the same);
// on a Cluster the records' node's clock estimated from below (Born),
// read first when no read of the last second tells it; 1 (before every
// epoch: the entry yields to any invalidation) when it cannot be read.
func (m *Mirror) BornAt(ctx context.Context, grant int64) int64 {
	if !m.cfg.Cluster {
		return grant
	}
	if ms, ok := m.Born(); ok {
		return ms
	}
	if m.Refresh(ctx, nil) == nil {
		if ms, ok := m.Born(); ok {
			return ms
		}
	}
	return 1
}

// Born returns an estimate of the records' node's clock now (µs) that is
// never ahead of it: the latest read's server time plus the time since its
// reply arrived. ok is false without a read in the last second.
func (m *Mirror) Born() (ms int64, ok bool) {
	s := m.clock.Load()
	if s == nil {
		return 0, false
	}
	since := m.cfg.Now() - s.local
	if since > int64(time.Second) {
		return 0, false
	}
	return s.server + since/int64(time.Microsecond), true
}
