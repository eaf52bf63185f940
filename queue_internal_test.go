package corral

import "testing"

// The queue's order: an invalidation a replay may already have sent never
// absorbs a newer one of the same key (which must land after the writes
// made before it), and a write that reached Redis drops only the
// invalidations of its key that no replay took.
func TestInvalidationsOrder(t *testing.T) {
	t.Parallel()
	q := newInvalidations(10)
	mustAdd := func(key string, want bool) {
		t.Helper()
		added, ok := q.add(key)
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
	if !q.has("k") {
		t.Fatal("applying the first invalidation of k dropped the second, made after the replay took the first")
	}
	if n := q.superseded("other"); n != 0 {
		t.Fatalf("superseded(other) dropped %d; want 0, its invalidation was taken by a replay", n)
	}
	if n := q.superseded("k"); n != 1 || q.has("k") {
		t.Fatalf("superseded(k) dropped %d, has(k) %v; want the untaken one dropped", n, q.has("k"))
	}
	mustAdd("k", true) // nothing of k is queued: a new one
	q.done(taken[1:])  // the replay applied other
	if q.has("other") || !q.has("k") || q.n.Load() != 1 {
		t.Fatalf("has(other) %v, has(k) %v, %d queued; want only the newest k", q.has("other"), q.has("k"), q.n.Load())
	}
	q.snapshot(true)
	mustAdd("k", true)
	if n := q.superseded("k"); n != 1 || !q.has("k") {
		t.Fatalf("superseded(k) dropped %d, has(k) %v; want the untaken one dropped, the taken one kept", n, q.has("k"))
	}
	mustAdd("k", true) // the kept one of k was taken: a new one is queued, not absorbed
}
