package corral_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// bigBatchResult is a "bigbatch" child's report: counts, since its keys
// are too many to list.
type bigBatchResult struct {
	Calls    int          `json:"calls"`    // loadMany calls of the first FetchMany
	Loaded   int          `json:"loaded"`   // keys those calls were given
	Values   int          `json:"values"`   // keys with a value in its result
	Wrong    []string     `json:"wrong"`    // keys whose value is not one a loadMany returned for it
	Err      string       `json:"err"`      // the first FetchMany's error
	Again    int          `json:"again"`    // loadMany calls of the second FetchMany
	AgainErr string       `json:"againErr"` // the second FetchMany's error
	Took     string       `json:"took"`     // how long the first FetchMany took
	Stats    corral.Stats `json:"stats"`
}

// childBigBatch makes one FetchMany of the keys big:<i> for i in
// CORRAL_TEST_RANGE ("from:to"), whose loadMany counts each key's loads in
// Redis, takes 300 ms and returns "<key>@<CORRAL_TEST_PROC>" for each key;
// then, once the parent writes "again", the same FetchMany, which should
// load nothing. It prints a bigBatchResult after each.
func childBigBatch(c *corral.Cache, rdb *redis.Client, in io.Reader) int {
	var from, to int
	fmt.Sscanf(os.Getenv("CORRAL_TEST_RANGE"), "%d:%d", &from, &to)
	keys := keyRange("big:", from, to)
	proc := os.Getenv("CORRAL_TEST_PROC")
	var mu sync.Mutex
	var calls, loaded int
	loadMany := countedLoad(rdb, "big:loads", proc, 300*time.Millisecond, func(missing []string) {
		mu.Lock()
		calls++
		loaded += len(missing)
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res bigBatchResult
	start := time.Now()
	vals, err := c.FetchMany(ctx, keys, time.Hour, loadMany)
	res.Took = time.Since(start).Round(time.Millisecond).String()
	if err != nil {
		res.Err = err.Error()
	}
	res.Values = len(vals)
	res.Stats = c.Stats()
	for k, v := range vals {
		if !strings.HasPrefix(string(v), k+"@") && len(res.Wrong) < 10 {
			res.Wrong = append(res.Wrong, k+"="+string(v))
		}
	}
	mu.Lock()
	res.Calls, res.Loaded, calls = calls, loaded, 0
	mu.Unlock()
	enc := json.NewEncoder(os.Stdout)
	enc.Encode(res)
	var line [6]byte
	if _, err := io.ReadFull(in, line[:]); err != nil || string(line[:]) != "again\n" {
		return 1
	}
	if _, err := c.FetchMany(ctx, keys, time.Hour, loadMany); err != nil {
		res.AgainErr = err.Error()
	}
	mu.Lock()
	res.Again = calls
	mu.Unlock()
	res.Stats = c.Stats()
	enc.Encode(res)
	return 0
}

// Two real OS processes each FetchMany n cold keys at once, half of them
// shared (process 0 asks for keys [0, n), process 1 for [n/2, 3n/2)): each
// key is loaded exactly once across the fleet, every key gets a value, no
// lease is lost, and the same FetchMany again loads nothing; with 10,000
// and 50,000 keys, at the default LeaseTTL and at 1 s. A batch's keys'
// leases are members of its group lease, renewed in their stead
// (docs/design.md, 3.2), and its flights are paced (batch.Paced). Under
// -race only 10,000 keys at the default lease run: the race detector slows
// each process five to tenfold, and at a 1 s lease a process starved for
// over a second (load average 13: three copies of this test at once)
// loses groups, as LeaseTTL says it may. make test runs the four cases
// again without it, alone, after the race-enabled suite.
func TestFetchMany_BigBatchesAcrossProcesses(t *testing.T) {
	type size struct {
		keys  int
		lease time.Duration // 0: the default
	}
	cases := []size{{10_000, 0}}
	if len(raceFlags) == 0 {
		cases = append(cases, size{10_000, time.Second}, size{50_000, 0}, size{50_000, time.Second})
	} else {
		t.Log("-race: 10,000 keys at a 1 s LeaseTTL, and 50,000 keys, run without the race detector (make test runs them so, alone)")
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%dkeys/lease=%v", tc.keys, tc.lease), func(t *testing.T) {
			e := newEnv(t, nil)
			n := tc.keys
			children := make([]*child, 2)
			for i := range children {
				env := []string{"CORRAL_TEST_REDIS=" + e.srv.Addr, "CORRAL_TEST_PROC=" + strconv.Itoa(i),
					fmt.Sprintf("CORRAL_TEST_RANGE=%d:%d", i*n/2, i*n/2+n)}
				if tc.lease > 0 {
					env = append(env, "CORRAL_TEST_LEASE_TTL="+tc.lease.String())
				}
				children[i] = startChild(t, "bigbatch", env...)
			}
			for _, c := range children {
				io.WriteString(c.stdin, "go\n")
			}
			read := func(i int) bigBatchResult {
				t.Helper()
				var r bigBatchResult
				if c := children[i]; !c.out.Scan() || json.Unmarshal(c.out.Bytes(), &r) != nil {
					t.Fatalf("child %d: no result: %q %v", i, c.out.Text(), c.out.Err())
				}
				return r
			}
			first := []bigBatchResult{read(0), read(1)}
			for i, r := range first {
				t.Logf("child %d: %d loadMany calls of %d keys, %d values in %s; %+v", i, r.Calls, r.Loaded, r.Values, r.Took, r.Stats)
				if r.Err != "" || r.Values != n || len(r.Wrong) > 0 {
					t.Errorf("child %d: %d values of %d keys (wrong: %v), error %q", i, r.Values, n, r.Wrong, r.Err)
				}
			}
			loads, err := e.rdb.HGetAll(context.Background(), "big:loads").Result()
			if err != nil {
				t.Fatal(err)
			}
			twice := 0
			for _, v := range loads {
				if v != "1" {
					twice++
				}
			}
			if total := n / 2 * 3; len(loads) != total || twice > 0 {
				t.Errorf("%d of %d keys loaded, %d of them more than once; want each once", len(loads), total, twice)
			}
			for _, c := range children {
				io.WriteString(c.stdin, "again\n")
			}
			for i := range children {
				r := read(i)
				if r.Again != 0 || r.AgainErr != "" {
					t.Errorf("child %d: the same FetchMany again made %d loadMany calls (error %q); want none", i, r.Again, r.AgainErr)
				}
				if s := r.Stats; s.LeasesLost > 0 || s.CommitsRejected > 0 || s.FailOpens > 0 {
					t.Errorf("child %d: %d leases lost, %d commits rejected, %d fail-opens; want none", i, s.LeasesLost, s.CommitsRejected, s.FailOpens)
				}
			}
		})
	}
}

// Memory stays bounded over many distinct keys: a Cache (near cache on)
// that has answered 10,000 keys holds about as much heap after another
// 90,000 as before them (no per-key state outlives its call: flights,
// peeks, leases, subscriptions, warnings, fail-safe copies, tag records
// are all bounded or dropped), and runs no more goroutines. The Cache runs
// in a child process of its own ("memory"), whose heap and goroutines are
// its alone: this binary's are shared with the parallel tests.
func TestMemoryBoundedOverManyKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := startChild(t, "memory", "CORRAL_TEST_REDIS="+e.srv.Addr, "CORRAL_TEST_NEAR=1")
	io.WriteString(c.stdin, "go\n")
	var r memoryResult
	if !c.out.Scan() || json.Unmarshal(c.out.Bytes(), &r) != nil {
		t.Fatalf("child: no result: %q %v", c.out.Text(), c.out.Err())
	}
	t.Logf("heap after 10,000 keys %d KiB, after 100,000 %d KiB; goroutines %d, %d", r.Heap[0]>>10, r.Heap[1]>>10, r.Goroutines[0], r.Goroutines[1])
	if r.Err != "" || r.Loads == 0 {
		t.Fatalf("child: %+v", r)
	}
	if r.Heap[1] > r.Heap[0]+4<<20 {
		t.Errorf("the heap grew by %d KiB over 90,000 more keys (%d B a key); want it bounded (under 4 MiB)", (r.Heap[1]-r.Heap[0])>>10, (r.Heap[1]-r.Heap[0])/90_000)
	}
	if r.Goroutines[1] > r.Goroutines[0]+20 {
		t.Errorf("%d goroutines after 100,000 keys, %d after 10,000", r.Goroutines[1], r.Goroutines[0])
	}
}

// memoryResult is a "memory" child's report: the heap in use (after GC)
// and the goroutines after 10,000 and after 100,000 keys.
type memoryResult struct {
	Heap       [2]uint64 `json:"heap"`
	Goroutines [2]int    `json:"goroutines"`
	Loads      uint64    `json:"loads"`
	Err        string    `json:"err"`
}

// childMemory fetches 100,000 distinct keys (FetchMany in batches of
// 1,000, and one Fetch a batch) and prints a memoryResult.
func childMemory(c *corral.Cache) int {
	ctx := context.Background()
	value := []byte("v")
	loadMany := func(_ context.Context, keys []string) (map[string][]byte, error) {
		m := make(map[string][]byte, len(keys))
		for _, k := range keys {
			m[k] = value
		}
		return m, nil
	}
	var r memoryResult
	fetch := func(from, to int) error {
		for i := from; i < to; i += 1000 {
			if _, err := c.FetchMany(ctx, keyRange("mem:", i, i+1000), time.Hour, loadMany); err != nil {
				return err
			}
			if _, err := c.Fetch(ctx, "single:"+strconv.Itoa(i), time.Hour, value2(value)); err != nil {
				return err
			}
		}
		return nil
	}
	measure := func(i int) {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		r.Heap[i], r.Goroutines[i] = m.HeapAlloc, runtime.NumGoroutine()
	}
	err := fetch(0, 10_000)
	if measure(0); err == nil {
		err = fetch(10_000, 100_000)
	}
	measure(1)
	if err != nil {
		r.Err = err.Error()
	}
	r.Loads = c.Stats().Loads
	json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

// value2 is a Fetch loader returning v.
func value2(v []byte) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return v, nil }
}
