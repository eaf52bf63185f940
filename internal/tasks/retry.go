package tasks

import (
	"context"
	"time"
)

// Retry calls try after a pause, again and again, the pause doubling from
// first to at most most, until try reports done, until passes, or ctx ends
// (closed: then try is not called again). tries is how many times try ran.
func Retry(ctx context.Context, until time.Time, first, most time.Duration, try func() (done bool)) (tries int, done, closed bool) {
	pause := first
	for time.Now().Before(until) {
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return tries, false, true
		}
		pause = min(2*pause, most)
		if tries++; try() {
			return tries, true, false
		}
	}
	return tries, false, false
}
