package corral_test

// The usual recipe's own flaws stay fixed: a lease is deleted by its holder
// only, and a caller that takes the lease re-checks for a value first. (No
// fixed sleep as the waiting mechanism: TestCase_C08; loops are bounded by
// the caller's context, LoadTimeout and maxStalls, tested in C01 and the
// liveness tests.)

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A holder whose lease passed to another process (it expired, and another
// caller took it) neither deletes nor overwrites the new holder's lease:
// not when its load fails (release.lua), not when it succeeds (commit.lua,
// whose value is then not stored).
func TestRecipe_LeaseDeletedOnlyByItsHolder(t *testing.T) {
	t.Parallel()
	for _, outcome := range []string{"the load fails", "the load succeeds"} {
		t.Run(outcome, func(t *testing.T) {
			e := newEnv(t, nil)
			rdb, f := e.faultyClient()
			c := newCache(t, rdb, nil)
			ctx := context.Background()
			const key, lease, other = "{also}", "corral:l:{also}:{also}", "0another-holder"
			var val []byte
			var err error
			script := "release"
			if outcome == "the load fails" {
				err = errors.New("origin down")
			} else {
				val, script = []byte("v"), "commit"
			}
			sha := scriptSHA(t, script)
			var sent atomic.Int32
			f.setAfter(func(cmd redis.Cmder) error {
				if isScript(cmd, sha) {
					sent.Add(1)
				}
				return nil
			})
			finish := hold(t, c, key, val, err)
			// The lease passes to another holder while the load runs.
			if err := e.rdb.Set(ctx, lease, other, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			finish()
			eventually(t, 5*time.Second, script+".lua sent", func() bool { return sent.Load() > 0 })
			if got, err := e.rdb.Get(ctx, lease).Result(); err != nil || got != other {
				t.Fatalf("after the old holder's %s, the lease is %q, %v; want the new holder's %q", script, got, err, other)
			}
			if n, err := e.rdb.Exists(ctx, "corral:e:{also}:{also}").Result(); err != nil || n != 0 {
				t.Fatalf("the old holder stored an entry (exists %d, %v)", n, err)
			}
			if script == "commit" { // counted once the Cache has read commit.lua's reply, after the hook saw it
				eventually(t, 5*time.Second, "the rejected commit counted", func() bool { return c.Stats().CommitsRejected == 1 })
			}
		})
	}
}

// Another process stores the value between a caller's miss and its taking
// the lease: the caller gets that value and never calls its loader, because
// fetch.lua looks for a value before it grants the lease, in one step.
func TestRecipe_RecheckBeforeLoading(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	rdb, f := e.faultyClient()
	c := newCache(t, rdb, nil)
	other := newCache(t, e.srv.Client(), nil)
	ctx := context.Background()
	var stored atomic.Bool
	f.setAfter(func(cmd redis.Cmder) error {
		// The peek (HMGET of the entry, or a script folding it with the
		// records' read) has just missed: the other process's value lands
		// now, before the fetch script runs.
		if isPeek(cmd, "{recheck}") && !stored.Swap(true) {
			if err := other.Set(ctx, "{recheck}", []byte("from the other process"), time.Minute); err != nil {
				t.Errorf("Set: %v", err)
			}
		}
		return nil
	})
	loads := 0
	v, err := c.Fetch(ctx, "{recheck}", time.Minute, func(context.Context) ([]byte, error) {
		loads++
		return []byte("loaded"), nil
	})
	if !stored.Load() {
		t.Fatal("the peek was not seen")
	}
	if err != nil || string(v) != "from the other process" || loads != 0 {
		t.Fatalf("Fetch = %q, %v with %d loads; want the other process's value and no load", v, err, loads)
	}
}
