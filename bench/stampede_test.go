//go:build unix

package main

import (
	"context"
	"io"
	"log/slog"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkStampedePeers is cold-stampede-20ms's burst (8 instances x 250
// goroutines, one cold key, a 20 ms origin) for corral and the in-process
// coalescers, in one process on the same redis-server, taken apart: how
// long after the release the first load began (load-start-µs) and the last
// caller entered Fetch (last-in-µs: the burst itself, which the harness's
// goroutines take turns to run), the callers' p50 and p99 from the release,
// the p99 after the last load returned, and the process's CPU per caller.
// Medians over the stampedes, in µs; and the goroutines' stacks per caller
// as the last load ends (stack-KiB/caller: 2 when the waiting callers kept
// their first stack, about 4 when each outgrew it).
//
// corral runs twice: on instances made just before each stampede, as make
// bench makes them (New alone, its first peek carrying its start-up), and
// on instances made once and kept (corral-running), as in a service that
// has been up a while. docs/design.md, 3.3, reads the figures.
func BenchmarkStampedePeers(b *testing.B) {
	ctx := context.Background()
	srv, err := startServer(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	for _, name := range []string{"sturdyc", "go-redis-cache", "corral", "corral-running"} {
		b.Run(name, func(b *testing.B) { stampedePeers(b, srv.Addr, name) })
	}
}

// stampedePeers is BenchmarkStampedePeers for the system name.
func stampedePeers(b *testing.B, addr, name string) {
	const instances, goroutines = 8, 250
	running := name == "corral-running"
	if running {
		name = "corral"
	}
	sys, ok := lookupSystem(name)
	if !ok {
		b.Fatalf("no system %q", name)
	}
	var began, loaded atomic.Int64 // the first load's start, the last load's end (UnixNano)
	var stacks atomic.Uint64       // the goroutines' stacks as the last load ended, bytes
	sample := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
	var sampling sync.Mutex
	load := func(ctx context.Context, key string) ([]byte, error) {
		began.CompareAndSwap(0, time.Now().UnixNano())
		t := time.NewTimer(20 * time.Millisecond) // the origin's latency
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		sampling.Lock()
		metrics.Read(sample) // every caller waits by now (the harness holds the rest of the 2 KiB stacks counted)
		stacks.Store(sample[0].Value.Uint64())
		sampling.Unlock()
		loaded.Store(time.Now().UnixNano())
		return make([]byte, 1<<10), nil
	}
	var insts []Instance
	closeAll := func() {
		for _, in := range insts {
			_ = in.Close()
		}
		insts = nil
	}
	defer closeAll()
	var loadStart, lastIn, p50, p99, afterLoad, cpu, stackKiB []float64
	for i := range b.N {
		if insts == nil || !running {
			closeAll()
			insts = peerInstances(b, sys, addr, instances, load)
		}
		key := "peers:" + strconv.Itoa(i) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
		began.Store(0)
		loaded.Store(0)
		released, last, answered, cpuUsed := burstOnce(b, insts, goroutines, key)
		cpu = append(cpu, cpuUsed.Seconds()*1e6/(instances*goroutines))
		stackKiB = append(stackKiB, float64(stacks.Load())/1024/(instances*goroutines))
		loadStart = append(loadStart, float64(began.Load()-released)/1e3)
		lastIn = append(lastIn, float64(last-released)/1e3)
		slices.Sort(answered)
		p50 = append(p50, float64(answered[len(answered)/2]-released)/1e3)
		at99 := answered[len(answered)*99/100]
		p99 = append(p99, float64(at99-released)/1e3)
		afterLoad = append(afterLoad, float64(at99-loaded.Load())/1e3)
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(median(loadStart), "load-start-µs")
	b.ReportMetric(median(lastIn), "last-in-µs")
	b.ReportMetric(median(p50), "p50-µs")
	b.ReportMetric(median(p99), "p99-µs")
	b.ReportMetric(median(afterLoad), "p99-after-load-µs")
	b.ReportMetric(median(cpu), "cpu-µs/caller")
	b.ReportMetric(median(stackKiB), "stack-KiB/caller")
	b.ReportMetric(0, "ns/op")
}

// peerInstances makes n instances of sys, each on its own client of addr,
// connected first (as make bench's harness does), loading with load.
func peerInstances(b *testing.B, sys System, addr string, n int, load func(context.Context, string) ([]byte, error)) []Instance {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	insts := make([]Instance, n)
	for i := range insts {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = rdb.Close() })
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		in, err := sys.New(Env{Addr: addr, Redis: rdb, TTL: time.Minute, Load: load, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		insts[i] = in
	}
	return insts
}

// burstOnce releases goroutines callers of each instance at once, each
// asking for key with a 5 s deadline (make bench's), and returns when they
// were released, when the last entered Fetch and each was answered
// (UnixNano), and the process's CPU time over the burst.
func burstOnce(b *testing.B, insts []Instance, goroutines int, key string) (released, last int64, answered []int64, cpu time.Duration) {
	release := make(chan struct{})
	var entered atomic.Int32
	var lastIn atomic.Int64
	total := int32(len(insts) * goroutines)
	answered = make([]int64, len(insts)*goroutines)
	var ready, done sync.WaitGroup
	for i, in := range insts {
		for g := range goroutines {
			ready.Add(1)
			done.Go(func() {
				ready.Done()
				<-release
				if entered.Add(1) == total {
					lastIn.Store(time.Now().UnixNano())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := in.Fetch(ctx, key)
				answered[i*goroutines+g] = time.Now().UnixNano()
				if err != nil {
					b.Error(err)
				}
			})
		}
	}
	ready.Wait()
	cpu0 := processCPU()
	released = time.Now().UnixNano()
	close(release)
	done.Wait()
	return released, lastIn.Load(), answered, processCPU() - cpu0
}

// processCPU is the process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
