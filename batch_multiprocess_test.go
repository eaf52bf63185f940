package corral_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// batchResult is a "batch" child's report.
type batchResult struct {
	Calls [][]string        `json:"calls"` // the keys of each loadMany call
	Vals  map[string]string `json:"vals"`
	Err   string            `json:"err,omitempty"`
	Stats corral.Stats      `json:"stats"`
}

// childBatch makes one FetchMany of the keys in CORRAL_TEST_KEYS (comma
// separated) whose loadMany counts each key's loads in Redis, takes 200 ms
// and returns "<key>@<CORRAL_TEST_PROC>" for each key, and prints a
// batchResult.
func childBatch(c *corral.Cache, rdb *redis.Client) int {
	keys := strings.Split(os.Getenv("CORRAL_TEST_KEYS"), ",")
	proc := os.Getenv("CORRAL_TEST_PROC")
	var mu sync.Mutex
	var res batchResult
	loadMany := countedLoad(rdb, "batch:loads", proc, 200*time.Millisecond, func(missing []string) {
		mu.Lock()
		res.Calls = append(res.Calls, slices.Clone(missing))
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vals, err := c.FetchMany(ctx, keys, time.Minute, loadMany)
	if err != nil {
		res.Err = err.Error()
	}
	res.Vals = make(map[string]string, len(vals))
	for k, v := range vals {
		res.Vals[k] = string(v)
	}
	res.Stats = c.Stats()
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// countedLoad returns a child's loadMany: it tells seen of the keys of each
// call, counts each key's loads in the Redis hash counts, takes latency
// (the origin's), and returns "<key>@<proc>" for each key.
func countedLoad(rdb *redis.Client, counts, proc string, latency time.Duration, seen func(keys []string)) func(context.Context, []string) (map[string][]byte, error) {
	return func(ctx context.Context, missing []string) (map[string][]byte, error) {
		seen(missing)
		pipe := rdb.Pipeline()
		for _, k := range missing {
			pipe.HIncrBy(ctx, counts, k, 1)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		<-time.After(latency)
		vals := make(map[string][]byte, len(missing))
		for _, k := range missing {
			vals[k] = []byte(k + "@" + proc)
		}
		return vals, nil
	}
}

// Four real OS processes each FetchMany an overlapping set of 100 cold keys
// at once (process i asks for keys 25i to 25i+99 of 175): each key is
// loaded exactly once across the fleet; each process calls loadMany at most
// once, with only keys it asked for and whose lease it won; and every
// caller gets, for every key, the value of the process that loaded it.
func TestFetchMany_FourProcesses(t *testing.T) {
	e := newEnv(t, nil)
	const processes, perProcess, step = 4, 100, 25
	all := keyRange("fleet:", 0, step*(processes-1)+perProcess)
	children := make([]*child, processes)
	for i := range children {
		children[i] = startChild(t, "batch", "CORRAL_TEST_REDIS="+e.srv.Addr, "CORRAL_TEST_PROC="+strconv.Itoa(i),
			"CORRAL_TEST_KEYS="+strings.Join(all[step*i:step*i+perProcess], ","))
	}
	for _, c := range children {
		io.WriteString(c.stdin, "go\n")
	}
	loadedBy := map[string]int{} // key -> the process whose loadMany got it
	results := make([]batchResult, processes)
	for i, c := range children {
		if !c.out.Scan() {
			t.Fatalf("child %d: no result: %v", i, c.out.Err())
		}
		r := &results[i]
		if err := json.Unmarshal(c.out.Bytes(), r); err != nil || r.Err != "" {
			t.Fatalf("child %d: %q (%v)", i, c.out.Text(), err)
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		asked := all[step*i : step*i+perProcess]
		if len(r.Calls) > 1 || r.Stats.FailOpens != 0 {
			t.Fatalf("child %d: %d loadMany calls (%d fail-opens); want at most 1 and none", i, len(r.Calls), r.Stats.FailOpens)
		}
		for _, call := range r.Calls {
			for _, k := range call {
				if !slices.Contains(asked, k) {
					t.Fatalf("child %d: loadMany got %q, which it did not ask for", i, k)
				}
				if p, dup := loadedBy[k]; dup {
					t.Fatalf("%q went to the loadMany of processes %d and %d", k, p, i)
				}
				loadedBy[k] = i
			}
		}
	}
	loads, err := e.rdb.HGetAll(context.Background(), "batch:loads").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(loadedBy) != len(all) || len(loads) != len(all) {
		t.Fatalf("%d keys went to a loadMany, %d were loaded; want all %d", len(loadedBy), len(loads), len(all))
	}
	for k, n := range loads {
		if n != "1" {
			t.Fatalf("%q loaded %s times", k, n)
		}
	}
	// Each process got every key it asked for, with the value of the one
	// process that loaded it: its own loads, the others' commits.
	for i, r := range results {
		asked := all[step*i : step*i+perProcess]
		if len(r.Vals) != len(asked) {
			t.Fatalf("child %d: %d values for %d keys", i, len(r.Vals), len(asked))
		}
		for _, k := range asked {
			if want := k + "@" + strconv.Itoa(loadedBy[k]); r.Vals[k] != want {
				t.Fatalf("child %d: %q = %q, want %q", i, k, r.Vals[k], want)
			}
		}
	}
	t.Logf("keys loaded by each process: %v", func() []int {
		n := make([]int, processes)
		for _, p := range loadedBy {
			n[p]++
		}
		return n
	}())
}
