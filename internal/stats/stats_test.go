package stats

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestSnapshot checks that each counter reaches its own field of Values.
func TestSnapshot(t *testing.T) {
	var c Counters
	c.Joined.Add(1)
	c.Queued.Add(2)
	c.Subscribed()
	c.Unsubscribed()
	c.RedisError()
	c.RedisError()
	v := c.Snapshot()
	if v.Joined != 1 || v.InvalidationsQueued != 2 || v.Subscribes != 1 || v.Unsubscribes != 1 || v.RedisErrors != 2 || v.Loads != 0 {
		t.Errorf("Snapshot = %+v", v)
	}
}

// A Striped counter loses no add from goroutines adding at once, and an
// add is a few nanoseconds where they run (BenchmarkStriped, against one
// shared atomic: BenchmarkSharedAtomic).
func TestStripedCountsEveryAdd(t *testing.T) {
	var s Striped
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 1000 {
				s.Add()
			}
		})
	}
	wg.Wait()
	if n := s.Load(); n != 16_000 {
		t.Fatalf("Load = %d after 16,000 adds", n)
	}
}

func BenchmarkStriped(b *testing.B) {
	var s Striped
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Add()
		}
	})
}

func BenchmarkSharedAtomic(b *testing.B) {
	var n atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
}
