package replay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The queue's order: an invalidation a replay may already have sent never
// absorbs a newer one of the same key (which must land after the writes
// made before it), and a write that reached Redis drops only the
// invalidations of its key that no replay took.
func TestInvalidationsOrder(t *testing.T) {
	t.Parallel()
	q := New(Config{Max: 10})
	mustAdd := func(key string, want bool) {
		t.Helper()
		added, ok := q.Add(key)
		if !ok || added != want {
			t.Fatalf("add(%q) = added %v, ok %v; want added %v", key, added, ok, want)
		}
	}
	mustAdd("k", true)
	mustAdd("k", false) // the first is not taken yet: it does the same
	mustAdd("other", true)

	taken := q.snapshot(true) // a replay sends these
	mustAdd("k", true)        // after the replay took the first: queued again
	mustAdd("k", false)       // absorbed by the second, not taken yet

	q.done(taken[:1]) // the replay applied the first k
	if !q.Has("k") {
		t.Fatal("applying the first invalidation of k dropped the second, made after the replay took the first")
	}
	if n := q.Superseded(context.Background(), "other"); n != 0 {
		t.Fatalf("superseded(other) dropped %d; want 0, its invalidation was taken by a replay", n)
	}
	if n := q.Superseded(context.Background(), "k"); n != 1 || q.Has("k") {
		t.Fatalf("superseded(k) dropped %d, has(k) %v; want the untaken one dropped", n, q.Has("k"))
	}
	mustAdd("k", true) // nothing of k is queued: a new one
	q.done(taken[1:])  // the replay applied other
	if q.Has("other") || !q.Has("k") || q.Len() != 1 {
		t.Fatalf("has(other) %v, has(k) %v, %d queued; want only the newest k", q.Has("other"), q.Has("k"), q.Len())
	}
	q.snapshot(true)
	mustAdd("k", true)
	if n := q.Superseded(context.Background(), "k"); n != 1 || !q.Has("k") {
		t.Fatalf("superseded(k) dropped %d, has(k) %v; want the untaken one dropped, the taken one kept", n, q.Has("k"))
	}
	mustAdd("k", true) // the kept one of k was taken: a new one is queued, not absorbed
}

// A replay applies the queue in order, skipping the rest of a node's
// invalidations once one of them failed; a recovering node's replay
// applies only its own; one refused for good is dropped.
func TestReplayByNode(t *testing.T) {
	t.Parallel()
	down := map[string]bool{"a": true}
	var sent, applied, dropped, refusals []string
	var recovering []bool
	refused := errors.New("NOPERM")
	q := New(Config{Max: 10, Timeout: time.Second, Rand: func() float64 { return 0.5 },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NodeOf: func(key string) string { return key[:1] },
		Delete: func(ctx context.Context, key string, recovery bool) error {
			sent, recovering = append(sent, key), append(recovering, recovery)
			switch {
			case key == "b-denied":
				return refused
			case down[key[:1]]:
				return errors.New("refused")
			}
			return nil
		},
		Denied: func(err error) bool { return errors.Is(err, refused) },
		Told: func(_ context.Context, e Event, key string) {
			switch e {
			case Applied:
				applied = append(applied, key)
			case Dropped:
				dropped = append(dropped, key)
			}
		},
		Refused: func(key string, err error) { refusals = append(refusals, key+" "+err.Error()) },
	})
	for _, k := range []string{"a1", "b1", "a2", "b-denied", "b2"} {
		q.Add(k)
	}
	q.Replay(context.Background(), "", false)
	if want := "a1 b1 b-denied b2"; strings.Join(sent, " ") != want {
		t.Fatalf("sent %v; want %s (a2 waits: a1 failed on its node)", sent, want)
	}
	if strings.Join(applied, " ") != "b1 b2" || strings.Join(dropped, " ") != "b-denied" || !q.Has("a1") || !q.Has("a2") {
		t.Fatalf("applied %v, dropped %v; want b1 b2 applied, b-denied dropped, a's queued", applied, dropped)
	}
	if strings.Join(refusals, ",") != "b-denied NOPERM" {
		t.Fatalf("refused %v; want b-denied's NOPERM", refusals)
	}
	down["a"] = false
	sent, recovering = nil, nil
	q.Add("b3")
	q.Replay(context.Background(), "a", true) // node a recovers
	if strings.Join(sent, " ") != "a1 a2" || !recovering[0] || !q.Has("b3") || q.Len() != 1 {
		t.Fatalf("a's recovery sent %v (recovery %v); want a1 a2 as recovery, b3 left", sent, recovering)
	}
	if keys := q.Abandon(); len(keys) != 1 || keys[0] != "b3" || q.Len() != 0 {
		t.Fatalf("Abandon = %v; want [b3], and the queue empty", keys)
	}
	if strings.Join(dropped, " ") != "b-denied b3" {
		t.Fatalf("dropped %v; want b3 abandoned after b-denied", dropped)
	}
}

// Run applies an invalidation as soon as it is added, and ends with its
// context.
func TestRunApplies(t *testing.T) {
	t.Parallel()
	done := make(chan string, 1)
	q := New(Config{Max: 10, Timeout: time.Second, Rand: func() float64 { return 0.5 },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NodeOf: func(string) string { return "" },
		Delete: func(ctx context.Context, key string, recovery bool) error { return nil },
		Denied: func(error) bool { return false },
		Told: func(_ context.Context, e Event, key string) {
			if e == Applied {
				done <- key
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		q.Run(ctx)
	}()
	q.Add("k")
	q.Kick()
	if key := <-done; key != "k" {
		t.Fatalf("applied %q; want k", key)
	}
	cancel()
	<-ended
}

// Invalidate tells Queued once per invalidation queued (none for one
// absorbed), Dropped when the queue is full; Superseded tells Applied for
// each it dropped, with the caller's context.
func TestInvalidateTells(t *testing.T) {
	t.Parallel()
	type ctxKey struct{}
	var told []string
	q := New(Config{Max: 2, Told: func(ctx context.Context, e Event, key string) {
		told = append(told, []string{"queued", "applied", "dropped"}[e]+" "+key+" "+ctx.Value(ctxKey{}).(string))
	}})
	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	for _, k := range []string{"a", "a", "b", "c"} {
		if ok := q.Invalidate(ctx, k); ok != (k != "c") {
			t.Fatalf("Invalidate(%s) = %v", k, ok)
		}
	}
	if n := q.Superseded(ctx, "a"); n != 1 {
		t.Fatalf("Superseded(a) = %d; want 1", n)
	}
	want := "queued a caller,queued b caller,dropped c caller,applied a caller"
	if got := strings.Join(told, ","); got != want {
		t.Fatalf("told %s; want %s", got, want)
	}
}
