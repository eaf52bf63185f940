package transport

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The meter tells a process whose goroutines wait for the CPU (goroutines
// that spin outnumber the CPUs 8 times over) from one whose goroutines run
// when they ask to (the spinners gone).
func TestCPUMeter(t *testing.T) {
	var m cpuMeter
	m.starved() // the first reading
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 8 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
			}
		}()
	}
	starved := within(10*time.Second, func() bool {
		<-time.After(50 * time.Millisecond) // a tick: goroutines wake and wait
		return m.starved()
	})
	stop.Store(true)
	wg.Wait()
	if !starved {
		t.Fatal("not starved with 8 spinning goroutines per CPU")
	}
	calm := within(10*time.Second, func() bool {
		<-time.After(50 * time.Millisecond)
		return !m.starved()
	})
	if !calm {
		t.Fatal("still starved 10s after the spinners stopped")
	}
}

// within polls cond until it holds or d has passed, and reports whether it
// held.
func within(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); {
		if cond() {
			return true
		}
	}
	return false
}
