//go:build !race

package corral_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

// Callers of a stampede that find their key's flight or peek under way
// wait within their goroutine's first stack (joinwait.go), and take their
// answer within it once woken: 500 of them, waiting on one load, hold about
// 2 KiB of stack each, while they wait and once answered, where each
// outgrew its first 2 KiB into 4 KiB before (as it waited, and then again
// as it took its answer). Without the race detector only, whose builds
// give every frame twice the room (make test runs it so, alone). A
// Fetch[T]'s callers are not held to it: the one that decodes the value
// for the others goes as deep as its codec, and each takes its answer
// through frames of its own (typed.go).
func TestStampede_WaitersKeepTheirFirstStack(t *testing.T) {
	ttl := time.Minute
	calls := map[string]func(c *corral.Cache, ctx context.Context, load func(context.Context) ([]byte, error)) error{
		"Fetch": func(c *corral.Cache, ctx context.Context, load func(context.Context) ([]byte, error)) error {
			_, err := c.Fetch(ctx, "k", ttl, load)
			return err
		},
		"FetchEntry": func(c *corral.Cache, ctx context.Context, load func(context.Context) ([]byte, error)) error {
			_, err := c.FetchEntry(ctx, "k", func(ctx context.Context) (corral.Entry, error) {
				v, err := load(ctx)
				return corral.Entry{Value: v, TTL: ttl}, err
			})
			return err
		},
	}
	for name, call := range calls {
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/warm=%v", name, warm), func(t *testing.T) {
				waiting, woken := stampedeStacks(t, warm, call)
				t.Logf("%.0f bytes of stack per waiting caller, %.0f once answered", waiting, woken)
				if waiting > 3<<10 {
					t.Fatalf("%.0f bytes of stack per waiting caller; want about 2 KiB (a goroutine's first stack): waiters outgrew it", waiting)
				}
				if woken > 3<<10 {
					t.Fatalf("%.0f bytes of stack per answered caller; want about 2 KiB: the answer's path outgrew the first stack", woken)
				}
			})
		}
	}
}

// stampedeStacks parks 500 callers (call) on one load of a new Cache's
// key, and returns the stack they hold per caller as they wait and once
// each has its answer (and waits to exit: a stack, once grown, stays
// grown while its goroutine lives).
func stampedeStacks(t *testing.T, warm bool, call func(c *corral.Cache, ctx context.Context, load func(context.Context) ([]byte, error)) error) (waiting, woken float64) {
	const n = 500
	var c *corral.Cache
	var release func()
	if warm { // the key is there; its peek's reply waits at a proxy until every caller joined
		var held <-chan struct{}
		c, held, release = heldPeek(t, nil, "k", value("warm-value"), "warm-value")
		defer func() {
			select {
			case <-held:
			default:
				t.Error("the peek's reply was not held back")
			}
		}()
	} else {
		c = newEnv(t, nil).c
	}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	runtime.GC() // frees the stacks cached from goroutines gone, which new ones would reuse unseen
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	joined := c.Stats().Joined
	gate, exit := make(chan struct{}), make(chan struct{})
	load := func(context.Context) ([]byte, error) { <-gate; return []byte("v"), nil }
	var answered, wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		answered.Add(1)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs[i] = call(c, ctx, load)
			answered.Done()
			<-exit
		})
	}
	defer wg.Wait()
	defer close(exit)
	if warm {
		eventually(t, 10*time.Second, "every caller joined the peek", func() bool { return corral.PeekCallers(c, "k") == n })
	} else {
		eventually(t, 10*time.Second, "every other caller joined the flight", func() bool { return c.Stats().Joined-joined == n-1 })
	}
	metrics.Read(sample)
	waiting = float64(sample[0].Value.Uint64()-before) / n
	if warm {
		release()
	}
	close(gate)
	answered.Wait()
	metrics.Read(sample)
	woken = float64(sample[0].Value.Uint64()-before) / n
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	return waiting, woken
}
