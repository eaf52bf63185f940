package transport

import (
	"runtime/metrics"
	"time"
)

// A process starved of CPU. The cap on a live node's batch (maxStalls
// bounds, liveness.go) is there for a node that answers its probes but
// never the batch: a connection lost on the way, a CLIENT PAUSE WRITE.
// A client whose goroutines wait for the CPU looks the same from the
// monitor: Redis answers the probe at once, and the reply to the batch sits
// unread in the socket. So the cap counts only time in which this process's
// goroutines got the CPU about when they asked for it, as the runtime
// measures it (/sched/latencies:seconds: how long goroutines stayed
// runnable before they ran).

const (
	schedLatencies = "/sched/latencies:seconds"
	// starvedWait is the wait for the CPU, at the 90th percentile of the
	// goroutines scheduled in a tick, from which the tick does not count.
	starvedWait = 20 * time.Millisecond
)

// cpuMeter tells whether goroutines waited long for the CPU. It is used by
// the monitor's goroutine only.
type cpuMeter struct {
	sample [1]metrics.Sample
	last   []uint64 // the histogram's counts at the latest reading
	prev   []uint64 // the reading before, whose memory is reused
}

// starved reports whether goroutines scheduled since the latest call waited
// starvedWait or more for the CPU, at the 90th percentile.
func (m *cpuMeter) starved() bool {
	m.sample[0].Name = schedLatencies
	metrics.Read(m.sample[:])
	if m.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return false
	}
	h := m.sample[0].Value.Float64Histogram()
	last := m.last
	// Read reuses the histogram's memory: keep a copy.
	m.last = append(m.prev[:0], h.Counts...)
	m.prev = last
	if len(last) != len(h.Counts) {
		return false // the first reading
	}
	var total uint64
	for i, n := range h.Counts {
		total += n - last[i]
	}
	if total == 0 {
		return false
	}
	// The bucket where the slowest tenth begins.
	seen, tenth := uint64(0), total-total*9/10
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if seen += h.Counts[i] - last[i]; seen >= tenth {
			return h.Buckets[i] >= starvedWait.Seconds()
		}
	}
	return false
}
