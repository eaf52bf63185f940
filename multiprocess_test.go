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
	"testing"
	"time"

	"github.com/corralhq/corral"
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

// runChild is the child's main. Role "stampede": connect to
// CORRAL_TEST_REDIS, say "ready", wait for "go" on stdin, then run
// CORRAL_TEST_GOROUTINES concurrent Fetch of CORRAL_TEST_KEY whose loader
// counts its runs in Redis and returns 1 KiB of fresh random bytes, and print
// one JSON result a caller.
func runChild(role string) int {
	if role != "stampede" {
		fmt.Fprintln(os.Stderr, "unknown child role", role)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("CORRAL_TEST_REDIS")})
	defer rdb.Close()
	c, err := corral.New(rdb, &corral.Options{Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	key := os.Getenv("CORRAL_TEST_KEY")
	n, _ := strconv.Atoi(os.Getenv("CORRAL_TEST_GOROUTINES"))
	load := func(ctx context.Context) ([]byte, error) {
		if err := rdb.Incr(ctx, "loads:"+key).Err(); err != nil {
			return nil, err
		}
		<-time.After(200 * time.Millisecond) // the origin's latency
		b := make([]byte, 1024)
		rand.Read(b)
		return b, nil
	}
	fmt.Println("ready")
	if line, _ := bufio.NewReader(os.Stdin).ReadString('\n'); line != "go\n" {
		return 1
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
