package corral_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// Multi-process tests re-execute the test binary with childEnv set; the
// child plays one app instance (runChild) and talks to the parent over
// stdin/stdout.
const childEnv = "CORRAL_TEST_CHILD"

// childResult is one caller's answer, as a child prints it.
type childResult struct {
	Sum string `json:"sum,omitempty"` // sha256 of the value
	Err string `json:"err,omitempty"`
}

// runChild is the child's main: connect to CORRAL_TEST_REDIS, say "ready",
// wait for "go" on stdin, play the role, print its results as JSON lines.
func runChild(role string) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("CORRAL_TEST_REDIS")})
	defer rdb.Close()
	opts := &corral.Options{Logger: quiet}
	if os.Getenv("CORRAL_TEST_SWR") != "" {
		opts = swrOptions()
	}
	if d, err := time.ParseDuration(os.Getenv("CORRAL_TEST_LEASE_TTL")); err == nil {
		opts.LeaseTTL = d
	}
	if os.Getenv("CORRAL_TEST_NEAR") != "" {
		opts.NearCache = corral.NearCacheOptions{Size: 100, TTL: time.Minute}
	}
	c, err := corral.New(rdb, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	key := os.Getenv("CORRAL_TEST_KEY")
	n, _ := strconv.Atoi(os.Getenv("CORRAL_TEST_GOROUTINES"))
	fmt.Println("ready")
	if line, _ := bufio.NewReader(os.Stdin).ReadString('\n'); line != "go\n" {
		return 1
	}
	switch role {
	case "stampede":
		return childStampede(c, rdb, key, n)
	case "swr":
		return childSteady(c, rdb, key, n)
	case "batch":
		return childBatch(c, rdb)
	case "bigbatch":
		return childBigBatch(c, rdb, os.Stdin)
	case "memory":
		return childMemory(c)
	case "reader", "setter", "deleter":
		d, _ := time.ParseDuration(os.Getenv("CORRAL_TEST_DURATION"))
		return childCoherence(c, role, key, n, d)
	}
	fmt.Fprintln(os.Stderr, "unknown child role", role)
	return 2
}

// childStampede runs n concurrent Fetch of key whose loader counts its runs
// in Redis and returns 1 KiB of fresh random bytes, and prints one JSON
// result a caller. With CORRAL_TEST_HANG set, the fleet's first load prints
// "loading" and never returns (its process is to be killed).
func childStampede(c *corral.Cache, rdb *redis.Client, key string, n int) int {
	var stdout sync.Mutex // the loader and the results share stdout
	load := func(ctx context.Context) ([]byte, error) {
		loads, err := rdb.Incr(ctx, "loads:"+key).Result()
		if err != nil {
			return nil, err
		}
		if loads == 1 && os.Getenv("CORRAL_TEST_HANG") != "" {
			stdout.Lock()
			fmt.Println("loading")
			stdout.Unlock()
			select {} // the origin hangs; the test kills this process
		}
		<-time.After(200 * time.Millisecond) // the origin's latency
		b := make([]byte, 1024)
		rand.Read(b)
		return b, nil
	}
	results := make([]childResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			v, err := c.Fetch(ctx, key, time.Minute, load)
			if err != nil {
				results[i].Err = err.Error()
				return
			}
			sum := sha256.Sum256(v)
			results[i].Sum = hex.EncodeToString(sum[:])
		}()
	}
	wg.Wait()
	stdout.Lock()
	defer stdout.Unlock()
	enc := json.NewEncoder(os.Stdout)
	for _, r := range results {
		enc.Encode(r)
	}
	return 0
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, childEnv+"="+role)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if !c.out.Scan() || c.out.Text() != "ready" {
		t.Fatalf("child did not get ready: %q %v", c.out.Text(), c.out.Err())
	}
	return c
}

// Four real OS processes x 100 goroutines on one cold key: one load across
// all of them, and every caller gets the same bytes.
func TestMultiProcessStampede(t *testing.T) {
	e := newEnv(t, nil)
	const processes, goroutines = 4, 100
	key := "hot:{mp}"
	children := make([]*child, processes)
	for i := range children {
		children[i] = startChild(t, "stampede", "CORRAL_TEST_REDIS="+e.srv.Addr,
			"CORRAL_TEST_KEY="+key, "CORRAL_TEST_GOROUTINES="+strconv.Itoa(goroutines))
	}
	for _, c := range children {
		io.WriteString(c.stdin, "go\n")
	}
	sums := map[string]int{}
	for i, c := range children {
		for range goroutines {
			if !c.out.Scan() {
				t.Fatalf("child %d: output ended: %v", i, c.out.Err())
			}
			var r childResult
			if err := json.Unmarshal(c.out.Bytes(), &r); err != nil || r.Err != "" {
				t.Fatalf("child %d: caller got %q (%v)", i, c.out.Text(), err)
			}
			sums[r.Sum]++
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	loads, _ := e.rdb.Get(context.Background(), "loads:"+key).Int()
	if loads != 1 || len(sums) != 1 {
		t.Fatalf("%d loads across %d processes, %d distinct values; want 1 and 1", loads, processes, len(sums))
	}
}

// swrOptions are the options of the stale-while-revalidate fleet test: a
// short TTL with a long stale window, early refresh off so that every
// refresh is an expiry's.
func swrOptions() *corral.Options {
	return &corral.Options{Logger: quiet, StaleTTL: time.Minute, DisableJitter: true, DisableEarlyRefresh: true}
}

const swrTTL, swrLoad = 300 * time.Millisecond, 100 * time.Millisecond

// steadyResult is a "swr" child's summary.
type steadyResult struct {
	Requests int           `json:"requests"`
	Errors   int           `json:"errors"`
	Slowest  time.Duration `json:"slowest"`
	Stats    corral.Stats  `json:"stats"`
}

// childSteady sends steady traffic on key from n goroutines for
// CORRAL_TEST_DURATION; its loader counts runs in Redis and takes swrLoad.
func childSteady(c *corral.Cache, rdb *redis.Client, key string, n int) int {
	d, _ := time.ParseDuration(os.Getenv("CORRAL_TEST_DURATION"))
	var counted atomic.Uint64 // loads counted in Redis
	load := func(ctx context.Context) ([]byte, error) {
		v, err := rdb.Incr(ctx, "loads:"+key).Result()
		if err != nil {
			return nil, err
		}
		counted.Add(1)
		<-time.After(swrLoad)
		return []byte(strconv.FormatInt(v, 10)), nil
	}
	var mu sync.Mutex
	var res steadyResult
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for ; time.Now().Before(end); <-tick.C {
				t0 := time.Now()
				_, err := c.Fetch(context.Background(), key, swrTTL, load)
				took := time.Since(t0)
				mu.Lock()
				res.Requests++
				res.Slowest = max(res.Slowest, took)
				if err != nil {
					res.Errors++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// A refresh holds the key's lease from its grant, before the flight that
	// got it has counted it (refresh.go): once no lease is held, every
	// refresh granted is counted. A refresh counted is counted before its
	// loader runs: its count in Redis is awaited too (5 s at most for
	// each), so that the two agree.
	lease := wire.NewNames(corral.DefaultPrefix, key).Lease
	for wait := time.Now().Add(5 * time.Second); rdb.Exists(context.Background(), lease).Val() == 1 && time.Now().Before(wait); {
		<-time.After(5 * time.Millisecond)
	}
	for wait := time.Now().Add(5 * time.Second); c.Stats().Refreshes > counted.Load() && time.Now().Before(wait); {
		<-time.After(5 * time.Millisecond)
	}
	res.Stats = c.Stats()
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// Stale-while-revalidate across 4 real processes under steady traffic:
// exactly one refresh per expiry across the fleet, and nobody waits while a
// stale value exists.
func TestMultiProcessStaleWhileRevalidate(t *testing.T) {
	const processes, goroutines, duration = 4, 10, 3 * time.Second
	e := newEnv(t, swrOptions())
	key := "hot:{swr}"
	// The key is cached once before the fleet starts: every later expiry
	// has a stale value to serve.
	if _, err := e.c.Fetch(context.Background(), key, swrTTL, func(ctx context.Context) ([]byte, error) {
		return []byte(strconv.FormatInt(e.rdb.Incr(ctx, "loads:"+key).Val(), 10)), nil
	}); err != nil {
		t.Fatal(err)
	}
	children := make([]*child, processes)
	for i := range children {
		children[i] = startChild(t, "swr", "CORRAL_TEST_REDIS="+e.srv.Addr, "CORRAL_TEST_KEY="+key,
			"CORRAL_TEST_GOROUTINES="+strconv.Itoa(goroutines), "CORRAL_TEST_DURATION="+duration.String(),
			"CORRAL_TEST_SWR=1")
	}
	for _, c := range children {
		io.WriteString(c.stdin, "go\n")
	}
	var total steadyResult
	for i, c := range children {
		if !c.out.Scan() {
			t.Fatalf("child %d: no result: %v", i, c.out.Err())
		}
		var r steadyResult
		if err := json.Unmarshal(c.out.Bytes(), &r); err != nil {
			t.Fatalf("child %d: %q: %v", i, c.out.Text(), err)
		}
		c.cmd.Wait()
		total.Requests += r.Requests
		total.Errors += r.Errors
		total.Slowest = max(total.Slowest, r.Slowest)
		total.Stats.Refreshes += r.Stats.Refreshes
		total.Stats.Waits += r.Stats.Waits
		total.Stats.Misses += r.Stats.Misses
		total.Stats.CommitsRejected += r.Stats.CommitsRejected
		total.Stats.StaleHits += r.Stats.StaleHits
	}
	loads, _ := e.rdb.Get(context.Background(), "loads:"+key).Int()
	refreshes := loads - 1 // the first load was the warm-up
	t.Logf("%d requests, %d refreshes, %d stale hits, slowest %v", total.Requests, refreshes, total.Stats.StaleHits, total.Slowest)
	if total.Errors != 0 || total.Stats.Waits != 0 || total.Stats.Misses != 0 {
		t.Fatalf("callers waited or failed while a stale value existed: %+v", total)
	}
	// No call waited for a load (Waits and Misses are 0 above): the slowest
	// call's time is logged, not asserted; a busy machine stretches it.
	// A refresh per expiry: each cycle lasts the TTL plus the load (and the
	// gap until the next request), so between these bounds.
	most := int(duration/swrTTL) + 1
	least := int(duration/(swrTTL+swrLoad+50*time.Millisecond)) - 1
	if refreshes < least || refreshes > most || int(total.Stats.Refreshes) != refreshes || total.Stats.CommitsRejected != 0 {
		t.Fatalf("%d refreshes (%d counted by the processes, %d commits rejected) in %v with a %v TTL; want one per expiry, %d..%d",
			refreshes, total.Stats.Refreshes, total.Stats.CommitsRejected, duration, swrTTL, least, most)
	}
}

// Four real processes in a stampede; the lease holder is SIGKILLed mid-load.
// Another process takes over within LeaseTTL + 1s, the origin sees 2 loads,
// and every surviving caller gets the value.
func TestMultiProcessLeaseHolderKilled(t *testing.T) {
	const processes, goroutines, leaseTTL = 4, 50, time.Second
	e := newEnv(t, nil)
	key := "hot:{kill}"
	children := make([]*child, processes)
	for i := range children {
		children[i] = startChild(t, "stampede", "CORRAL_TEST_REDIS="+e.srv.Addr, "CORRAL_TEST_KEY="+key,
			"CORRAL_TEST_GOROUTINES="+strconv.Itoa(goroutines), "CORRAL_TEST_LEASE_TTL="+leaseTTL.String(),
			"CORRAL_TEST_HANG=1")
	}
	type line struct {
		child int
		text  string
		at    time.Time
	}
	lines := make(chan line, processes*(goroutines+1))
	var readers sync.WaitGroup
	for i, c := range children {
		io.WriteString(c.stdin, "go\n")
		readers.Add(1)
		go func() {
			defer readers.Done()
			for c.out.Scan() {
				lines <- line{i, c.out.Text(), time.Now()}
			}
		}()
	}
	var holder int
	var killed time.Time
	for l := range lines {
		if l.text == "loading" {
			holder = l.child
			children[holder].cmd.Process.Kill() // SIGKILL, mid-load
			killed = time.Now()
			break
		}
	}
	var last time.Time
	sums := map[string]int{}
	for n := 0; n < (processes-1)*goroutines; n++ {
		select {
		case l := <-lines:
			var r childResult
			if err := json.Unmarshal([]byte(l.text), &r); err != nil || r.Err != "" || l.child == holder {
				t.Fatalf("child %d: %q (%v)", l.child, l.text, err)
			}
			sums[r.Sum]++
			last = l.at
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d surviving callers answered", n, (processes-1)*goroutines)
		}
	}
	for i, c := range children {
		if i != holder {
			if err := c.cmd.Wait(); err != nil {
				t.Fatalf("child %d: %v", i, err)
			}
		}
	}
	readers.Wait()
	loads, _ := e.rdb.Get(context.Background(), "loads:"+key).Int()
	if loads != 2 || len(sums) != 1 {
		t.Fatalf("%d loads, %d distinct values; want 2 loads (the killed one and the takeover), 1 value", loads, len(sums))
	}
	if took := last.Sub(killed); took > leaseTTL+time.Second {
		t.Fatalf("the survivors got the value %v after the kill; want within LeaseTTL + 1s", took)
	}
	t.Logf("takeover: every survivor answered %v after the holder was killed", last.Sub(killed).Round(time.Millisecond))
}
