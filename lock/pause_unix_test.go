//go:build unix

package lock_test

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/lock"
)

// A holder process stopped (SIGSTOP: the long GC pause of Kleppmann's
// example) past its TTL, watchdog and all. Another process takes the lock
// with a larger fence and writes; the stale holder, resumed, finds its Lock
// ended, its fenced write refused, and its refresh and release refused, and
// the new holder's lock and data stay as they were.
func TestMultiProcessHolderPaused(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	const key, res, ttl = "paused:{q}", "resource:{q}", 300 * time.Millisecond
	c := startChild(t, "pause", "LOCK_TEST_REDIS="+srv.Addr, "LOCK_TEST_KEY="+key,
		"LOCK_TEST_TTL="+ttl.String(), "LOCK_TEST_RESOURCE="+res)
	stale := c.held(t)
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer c.cmd.Process.Signal(syscall.SIGCONT)

	ctx := context.Background()
	locks := newLocks(t, rdb, &lock.Options{Retry: lock.LinearBackoff(10 * time.Millisecond)})
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := locks.Obtain(octx, key, 10*time.Second)
	if err != nil {
		t.Fatalf("Obtain while the holder is stopped: %v", err)
	}
	if l.Fence() <= stale {
		t.Fatalf("the new holder's fence %d is not above the stopped holder's %d", l.Fence(), stale)
	}
	if ok, err := write(ctx, rdb, res, l.Fence(), "new"); !ok || err != nil {
		t.Fatalf("the new holder's write: %v, %v", ok, err)
	}

	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	c.send(t, "go")
	var r pauseReport
	if err := json.Unmarshal([]byte(c.line(t)), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Ended || r.Wrote || !strings.Contains(r.Refresh, "not held") || !strings.Contains(r.Release, "not held") {
		t.Fatalf("the resumed holder: %+v; want its Lock ended, its write refused, Refresh and Release not held", r)
	}
	if v := rdb.HGet(ctx, res, "value").Val(); v != "new" {
		t.Fatalf("the resource holds %q", v)
	}
	if left, err := l.TTL(ctx); err != nil || left <= 0 || left > 10*time.Second {
		t.Fatalf("the new holder's TTL = %v, %v", left, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
