package demo

import (
	"context"
	"sync/atomic"
	"time"
)

// meter stands between one strategy's caches and the origin: it adds the
// configured latency to every query and measures what the origin went
// through. It is safe for concurrent use.
type meter struct {
	origin  *Origin
	latency time.Duration

	loads    atomic.Int64 // queries started
	inflight atomic.Int64 // queries running now
	peak     atomic.Int64 // the most queries ever running at once
	total    atomic.Int64 // summed duration of finished queries, ns
	finished atomic.Int64 // queries finished, with or without error
}

// load queries the origin for customer, after the added latency.
func (m *meter) load(ctx context.Context, customer int64) ([]byte, error) {
	m.loads.Add(1)
	n := m.inflight.Add(1)
	for {
		p := m.peak.Load()
		if n <= p || m.peak.CompareAndSwap(p, n) {
			break
		}
	}
	start := time.Now()
	defer func() {
		m.total.Add(int64(time.Since(start)))
		m.finished.Add(1)
		m.inflight.Add(-1)
	}()
	if m.latency > 0 {
		t := time.NewTimer(m.latency) // models the network distance to the database
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return m.origin.Aggregate(ctx, customer)
}

// meanMS is the mean duration of one query in ms, 0 when none finished.
func (m *meter) meanMS() float64 {
	n := m.finished.Load()
	if n == 0 {
		return 0
	}
	return float64(m.total.Load()) / float64(n) / float64(time.Millisecond)
}
