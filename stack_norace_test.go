//go:build !race

package corral_test

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// Callers of a stampede that find their key's flight or peek under way
// wait within their goroutine's first stack (joinwait.go): 500 of them,
// waiting on one load, hold about 2 KiB of stack each, where each outgrew
// its first 2 KiB into 4 KiB before. Without the race detector only, whose
// builds give every frame twice the room (make test runs it so, alone).
func TestStampede_WaitersKeepTheirFirstStack(t *testing.T) {
	e := newEnv(t, nil)
	const n = 500
	sample := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	runtime.GC() // frees the stacks cached from goroutines gone, which new ones would reuse unseen
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	joined := e.c.Stats().Joined
	gate := make(chan struct{})
	load := func(context.Context) ([]byte, error) { <-gate; return []byte("v"), nil }
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, errs[i] = e.c.Fetch(ctx, "k", time.Minute, load)
		})
	}
	eventually(t, 10*time.Second, "every other caller joined the flight", func() bool { return e.c.Stats().Joined-joined == n-1 })
	metrics.Read(sample)
	perCaller := float64(sample[0].Value.Uint64()-before) / n
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	t.Logf("%.0f bytes of stack per waiting caller", perCaller)
	if perCaller > 3<<10 {
		t.Fatalf("%.0f bytes of stack per waiting caller; want about 2 KiB (a goroutine's first stack): waiters outgrew it", perCaller)
	}
}
