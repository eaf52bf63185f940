package near

import (
	"sync"
	"time"

	"github.com/maypok86/otter/v2"
)

// otter reads its clock on every read, to tell whether the copy has
// expired; on a virtual machine without a fast clock that read is about
// half of a near hit. The copies' expiries that decide a hit are this
// package's own (Entry.fresh, safe, Soft, on Clock), read once per hit, so
// otter's expiry only frees memory: otter reads a coarse clock instead
// (otter.CoarseClock), shared by every near cache of the process and
// stopped when the last is closed, and keeps each copy coarseResolution
// longer than its life, so that a clock lagging by up to that much drops
// no copy still fresh. The clock lags further only when its goroutine
// cannot run in time (a process starved of CPU): otter may then drop a
// copy before its end, a miss, never a stale hit. A near cache never
// closed keeps the goroutine for the life of the process.
const coarseResolution = 100 * time.Millisecond

var coarse struct {
	mu    sync.Mutex
	users int
	clock *otter.CoarseClock
}

// acquireCoarse returns the shared coarse clock, started for its first
// user; each call is matched by a releaseCoarse.
func acquireCoarse() *otter.CoarseClock {
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	if coarse.users == 0 {
		coarse.clock = otter.NewCoarseClock(coarseResolution)
	}
	coarse.users++
	return coarse.clock
}

// releaseCoarse stops the shared coarse clock's goroutine once its last
// user is done: a clock stopped reads the precise time.
func releaseCoarse() {
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	if coarse.users--; coarse.users == 0 {
		coarse.clock.Stop()
		coarse.clock = nil
	}
}
