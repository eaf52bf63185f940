package lock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/lock"
	"github.com/redis/go-redis/v9"
)

// Multi-process tests re-execute the test binary with childEnv set; the
// child plays another process of the fleet (runChild) and talks to the
// parent over stdin and stdout.
const childEnv = "LOCK_TEST_CHILD"

// runChild is the child's main: connect to LOCK_TEST_REDIS and play role.
func runChild(role string) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("LOCK_TEST_REDIS")})
	defer rdb.Close()
	key := os.Getenv("LOCK_TEST_KEY")
	in := bufio.NewReader(os.Stdin)
	fail := func(err error) int {
		fmt.Println("error:", err)
		return 1
	}
	switch role {
	case "contend":
		// Contend for key LOCK_TEST_ROUNDS times once the parent says "go".
		rounds, _ := strconv.Atoi(os.Getenv("LOCK_TEST_ROUNDS"))
		c, err := lock.New(rdb, contention())
		if err != nil {
			return fail(err)
		}
		fmt.Println("ready")
		if line, _ := in.ReadString('\n'); line != "go\n" {
			return 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := contend(ctx, c, rdb, key, rounds, "process "+strconv.Itoa(os.Getpid())); err != nil {
			return fail(err)
		}
		fmt.Println("ok")
		return 0
	case "hold", "pause":
		// Hold key, kept alive by the watchdog, until killed ("hold"), or
		// until told "go" ("pause", whose parent stops and resumes this
		// process meanwhile); then report on the stale Lock.
		ttl, _ := time.ParseDuration(os.Getenv("LOCK_TEST_TTL"))
		c, err := lock.New(rdb, &lock.Options{Watchdog: true})
		if err != nil {
			return fail(err)
		}
		ctx := context.Background()
		l, err := c.Obtain(ctx, key, ttl)
		if err != nil {
			return fail(err)
		}
		fmt.Println("held", l.Fence())
		if line, _ := in.ReadString('\n'); line != "go\n" {
			return 1
		}
		var r pauseReport
		select {
		case <-l.Done():
			r.Ended = true
		case <-time.After(10 * time.Second):
		}
		r.Wrote, _ = write(ctx, rdb, os.Getenv("LOCK_TEST_RESOURCE"), l.Fence(), "stale")
		r.Refresh = errString(l.Refresh(ctx, time.Minute))
		r.Release = errString(l.Release(ctx))
		json.NewEncoder(os.Stdout).Encode(r)
		return 0
	}
	return fail(fmt.Errorf("unknown role %q", role))
}

// pauseReport is what a paused holder saw after it was resumed.
type pauseReport struct {
	Ended   bool   // its Lock ended
	Wrote   bool   // the fenced resource accepted its write
	Refresh string // Refresh's error
	Release string // Release's error
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// child is a running child process.
type child struct {
	cmd   *exec.Cmd
	stdin io.Writer
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
	return &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
}

// line returns the child's next line of output.
func (c *child) line(t *testing.T) string {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("child %d said nothing more: %v", c.cmd.Process.Pid, c.out.Err())
	}
	return c.out.Text()
}

func (c *child) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, s+"\n"); err != nil {
		t.Fatal(err)
	}
}

// held reads a holding child's "held FENCE" line.
func (c *child) held(t *testing.T) int64 {
	t.Helper()
	line := c.line(t)
	f, err := strconv.ParseInt(strings.TrimPrefix(line, "held "), 10, 64)
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("child: %q", line)
	}
	return f
}

// Four real OS processes contend for one lock: one holder at a time, fences
// in order.
func TestMultiProcessContention(t *testing.T) {
	srv := redistest.Start(t)
	const procs, rounds, key = 4, 15, "procs:{p}"
	children := make([]*child, procs)
	for i := range children {
		children[i] = startChild(t, "contend", "LOCK_TEST_REDIS="+srv.Addr, "LOCK_TEST_KEY="+key,
			"LOCK_TEST_ROUNDS="+strconv.Itoa(rounds))
		if got := children[i].line(t); got != "ready" {
			t.Fatalf("child: %q", got)
		}
	}
	for _, c := range children {
		c.send(t, "go")
	}
	for _, c := range children {
		if got := c.line(t); got != "ok" {
			t.Fatalf("child: %q", got)
		}
	}
	checkContention(t, srv.Client(), key, procs*rounds)
}

// A holder process killed while it holds the lock: its watchdog dies with
// it, the lock expires after its TTL, and another process takes over with a
// larger fence.
func TestMultiProcessHolderKilled(t *testing.T) {
	srv := redistest.Start(t)
	const key, ttl = "killed:{k}", 600 * time.Millisecond
	c := startChild(t, "hold", "LOCK_TEST_REDIS="+srv.Addr, "LOCK_TEST_KEY="+key, "LOCK_TEST_TTL="+ttl.String())
	fence := c.held(t)
	locks := newLocks(t, srv.Client(), &lock.Options{Retry: lock.LinearBackoff(10 * time.Millisecond)})
	ctx := context.Background()

	// The watchdog keeps it past its TTL while the process lives.
	short, cancel := context.WithTimeout(ctx, 2*ttl)
	defer cancel()
	if _, err := locks.Obtain(short, key, time.Second); err == nil {
		t.Fatal("obtained a lock whose holder's watchdog keeps it")
	}

	c.cmd.Process.Kill()
	c.cmd.Wait()
	killed := time.Now()
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := locks.Obtain(octx, key, time.Second)
	if err != nil {
		t.Fatalf("Obtain after the holder died: %v", err)
	}
	if took := time.Since(killed); took > ttl+prompt {
		t.Fatalf("took over %v after the holder died; its TTL was %v", took, ttl)
	}
	if l.Fence() <= fence {
		t.Fatalf("fence %d after the dead holder's %d", l.Fence(), fence)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
