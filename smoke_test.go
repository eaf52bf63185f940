package corral_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	var loads atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := e.c.Fetch(ctx, "k", time.Minute, func(context.Context) ([]byte, error) {
				loads.Add(1)
				time.Sleep(50 * time.Millisecond)
				return []byte("v"), nil
			})
			if err != nil || string(v) != "v" {
				t.Errorf("Fetch = %q, %v", v, err)
			}
		}()
	}
	wg.Wait()
	if loads.Load() != 1 {
		t.Fatalf("loads = %d", loads.Load())
	}
	t.Logf("%+v", e.c.Stats())
}
