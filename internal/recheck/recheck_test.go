package recheck

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestAfterIsBoundedAndJittered(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for range 200 {
		for _, pttl := range []time.Duration{-5, 0, 300 * time.Millisecond, time.Hour} {
			d := After(pttl, time.Second, rand.Float64())
			base := min(max(pttl, time.Millisecond), time.Second)
			if d < base || d > base+base/4+time.Millisecond {
				t.Fatalf("After(%v) = %v, want in [%v, %v]", pttl, d, base, base+base/4)
			}
			if pttl == 300*time.Millisecond {
				seen[d] = true
			}
		}
	}
	if len(seen) < 50 {
		t.Fatalf("After has little jitter: %d distinct values in 200", len(seen))
	}
}

// Polls double from 25 ms to 200 ms, each with up to 50 ms of jitter, so
// none is longer than 250 ms.
func TestPollDoublesToItsBound(t *testing.T) {
	t.Parallel()
	for n, want := range []time.Duration{25, 50, 100, 200, 200, 200} {
		want *= time.Millisecond
		if d := Poll(n, 0); d != want {
			t.Fatalf("Poll(%d, 0) = %v, want %v", n, d, want)
		}
		if d := Poll(n, 0.999); d < want || d >= want+50*time.Millisecond {
			t.Fatalf("Poll(%d, 0.999) = %v, want in [%v, %v)", n, d, want, want+50*time.Millisecond)
		}
	}
	if d := Poll(1000, 0.5); d != 225*time.Millisecond {
		t.Fatalf("Poll(1000, 0.5) = %v, want 225ms", d)
	}
}
