package corral_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

// staleBound is how long after a write returned a read may still see what
// was there before it: the time an invalidation takes to reach another
// instance. The tests assert this loose bound; BenchmarkNearInvalidation
// measures the real figure.
const staleBound = 500 * time.Millisecond

// coherenceRecord is one operation of a coherence child: a read (Start, Val)
// or a write (Start, End, Op).
type coherenceRecord struct {
	Op    string `json:"op"`
	Start int64  `json:"s"`
	End   int64  `json:"e,omitempty"`
	Val   string `json:"v,omitempty"`
}

// childCoherence plays one role of TestMultiProcessNearCoherence for d:
// readers Fetch key in n goroutines (the loader's value says when it was
// loaded); the setter Sets it, and the deleter Deletes it, every 20 ms. Each
// value says when it was made ("w:<ns>" for a Set begun then, "l:<ns>" for a
// load). Every operation is printed as a JSON line.
func childCoherence(c *corral.Cache, role, key string, n int, d time.Duration) int {
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	emit := func(r coherenceRecord) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(r)
		out.Write(append(b, '\n'))
	}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				start := time.Now().UnixNano()
				switch role {
				case "reader":
					v, err := c.Fetch(ctx, key, time.Hour, func(context.Context) ([]byte, error) {
						return []byte("l:" + strconv.FormatInt(time.Now().UnixNano(), 10)), nil
					})
					if err != nil {
						v = []byte("error: " + err.Error())
					}
					emit(coherenceRecord{Op: "read", Start: start, Val: string(v)})
					<-time.After(200 * time.Microsecond)
				case "setter":
					c.Set(ctx, key, []byte("w:"+strconv.FormatInt(start, 10)), time.Hour)
					emit(coherenceRecord{Op: "set", Start: start, End: time.Now().UnixNano()})
					<-time.After(20 * time.Millisecond)
				case "deleter":
					c.Delete(ctx, key)
					emit(coherenceRecord{Op: "delete", Start: start, End: time.Now().UnixNano()})
					<-time.After(20 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	emit(coherenceRecord{Op: "near-hits", Val: strconv.FormatUint(c.Stats().NearHits, 10)})
	mu.Lock()
	out.Flush()
	mu.Unlock()
	return 0
}

// Three OS processes hammer one key, served from their near caches, while a
// fourth Sets it and a fifth Deletes it: no read that starts more than
// staleBound after a write returned sees a value made before that write
// began. (NearCache.TTL is a minute here: only invalidations keep the copies
// fresh.)
func TestMultiProcessNearCoherence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const key = "{coherent}"
	env := []string{"CORRAL_TEST_REDIS=" + e.srv.Addr, "CORRAL_TEST_KEY=" + key, "CORRAL_TEST_NEAR=1",
		"CORRAL_TEST_DURATION=3s", "CORRAL_TEST_GOROUTINES=4"}
	var children []*child
	for _, role := range []string{"reader", "reader", "reader", "setter", "deleter"} {
		children = append(children, startChild(t, role, env...))
	}
	for _, c := range children {
		fmt.Fprintln(c.stdin, "go")
	}
	var reads, writes []coherenceRecord
	nearHits := 0
	for _, c := range children {
		for c.out.Scan() {
			var r coherenceRecord
			if err := json.Unmarshal(c.out.Bytes(), &r); err != nil {
				t.Fatalf("child printed %q: %v", c.out.Text(), err)
			}
			switch r.Op {
			case "read":
				reads = append(reads, r)
			case "near-hits":
				n, _ := strconv.Atoi(r.Val)
				nearHits += n
			default:
				writes = append(writes, r)
			}
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	if len(reads) < 1000 || len(writes) < 100 || nearHits < len(reads)/10 {
		t.Fatalf("%d reads (%d near hits), %d writes: the children did not run, or not from memory", len(reads), nearHits, len(writes))
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].End < writes[j].End })
	// latest[i] is the latest start among writes[:i+1]: a value made before
	// it predates a write that had returned by writes[i].End.
	latest := make([]int64, len(writes))
	for i, w := range writes {
		latest[i] = w.Start
		if i > 0 {
			latest[i] = max(latest[i], latest[i-1])
		}
	}
	stale := 0
	for _, r := range reads {
		if strings.HasPrefix(r.Val, "error") {
			t.Fatalf("a read failed: %s", r.Val)
		}
		made, _ := strconv.ParseInt(r.Val[2:], 10, 64)
		// The writes that returned more than staleBound before the read
		// began: the value must not predate any of them.
		i := sort.Search(len(writes), func(i int) bool { return writes[i].End > r.Start-int64(staleBound) })
		if i > 0 && made < latest[i-1] {
			stale++
		}
	}
	if stale > 0 {
		t.Fatalf("%d of %d reads saw a value older than a write that returned more than %v before them", stale, len(reads), staleBound)
	}
	t.Logf("%d reads (%d from memory), %d writes: none older than %v after a write", len(reads), nearHits, len(writes), staleBound)
}
