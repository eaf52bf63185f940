package corral

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/renewal"
	"github.com/corralhq/corral/internal/startup"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/watchdog"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

func testStore(t *testing.T, args ...string) (*store, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t, args...).Client()
	o, err := (&Options{RedisTimeout: time.Second, NoticeInlineLimit: 8}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(rdb, o, &counters{}, storeHooks{})
	t.Cleanup(s.close)
	return s, rdb
}

// TestFetchScriptReplies drives fetch.lua through every row of its table.
func TestFetchScriptReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	n := wire.NewNames("corral", "k")
	lt := 2 * time.Second

	// No entry, lease free: LOAD, and the lease is ours with an expiry.
	r, err := s.fetch(ctx, n, fetchArgs{token: "tokA", leaseTTL: lt, x: 0})
	if err != nil || r.Kind != wire.Load || r.Now <= 0 {
		t.Fatalf("cold fetch = %+v, %v; want LOAD", r, err)
	}
	if got := rdb.Get(ctx, n.Lease).Val(); got != "tokA" {
		t.Fatalf("lease = %q, want tokA", got)
	}
	if pttl := rdb.PTTL(ctx, n.Lease).Val(); pttl <= 0 || pttl > lt {
		t.Fatalf("lease PTTL = %v, want (0, %v]", pttl, lt)
	}

	// No entry, lease held by another: WAIT with the lease's PTTL.
	r, err = s.fetch(ctx, n, fetchArgs{token: "tokB", leaseTTL: lt, x: 0})
	if err != nil || r.Kind != wire.Wait || r.PTTL <= 0 || r.PTTL > lt {
		t.Fatalf("fetch while leased = %+v, %v; want WAIT with 0 < pttl <= %v", r, err, lt)
	}

	// A commit by a token that does not hold the lease is rejected.
	w := entryWrite{value: []byte("v1"), soft: time.Minute, hard: time.Minute, took: 40 * time.Millisecond}
	if ok, err := s.commit(ctx, n, "tokB", w); err != nil || ok {
		t.Fatalf("commit by non-holder = %v, %v; want rejected", ok, err)
	}
	// The holder's commit stores the entry and deletes the lease.
	if ok, err := s.commit(ctx, n, "tokA", w); err != nil || !ok {
		t.Fatalf("commit by holder = %v, %v; want stored", ok, err)
	}
	if rdb.Exists(ctx, n.Lease).Val() != 0 {
		t.Fatal("lease still exists after commit")
	}
	h := rdb.HGetAll(ctx, n.Entry).Val()
	if h["v"] != "v1" || h["d"] != "40" || h["f"] != "" || h["s"] == "" {
		t.Fatalf("entry = %v", h)
	}

	// Fresh entry, no early refresh: HIT without refresh, no lease taken.
	r, err = s.fetch(ctx, n, fetchArgs{token: "tokC", leaseTTL: lt, x: 0})
	if err != nil || r.Kind != wire.Hit || string(r.Payload) != "v1" || r.Refresh || r.Flags.Kind != wire.Value {
		t.Fatalf("fresh fetch = %+v, %v; want HIT v1", r, err)
	}
	if rdb.Exists(ctx, n.Lease).Val() != 0 {
		t.Fatal("a plain HIT took the lease")
	}

	// Fresh entry, XFetch fires (d*x far beyond the remaining minute): HIT
	// and "you refresh", with the lease taken.
	r, err = s.fetch(ctx, n, fetchArgs{token: "tokC", leaseTTL: lt, x: 1e9})
	if err != nil || r.Kind != wire.Hit || !r.Refresh {
		t.Fatalf("early-refresh fetch = %+v, %v; want HIT + refresh", r, err)
	}
	if rdb.Get(ctx, n.Lease).Val() != "tokC" {
		t.Fatal("early refresh did not take the lease")
	}
	// XFetch fires but the lease is held: a plain HIT.
	r, err = s.fetch(ctx, n, fetchArgs{token: "tokD", leaseTTL: lt, x: 1e9})
	if err != nil || r.Kind != wire.Hit || r.Refresh {
		t.Fatalf("early-refresh fetch while leased = %+v, %v; want plain HIT", r, err)
	}
	if ok, _ := s.release(ctx, n, "tokC", releaseArgs{}); !ok {
		t.Fatal("release by holder failed")
	}

	// Past the soft expiry, inside the hard TTL: STALE.
	rdb.HSet(ctx, n.Entry, "s", r.Now-1000)
	r, err = s.fetch(ctx, n, fetchArgs{token: "tokE", leaseTTL: lt, x: 0})
	if err != nil || r.Kind != wire.Stale || string(r.Payload) != "v1" || !r.Refresh {
		t.Fatalf("stale fetch = %+v, %v; want STALE + refresh", r, err)
	}
	r, err = s.fetch(ctx, n, fetchArgs{token: "tokF", leaseTTL: lt, x: 0})
	if err != nil || r.Kind != wire.Stale || r.Refresh {
		t.Fatalf("stale fetch while leased = %+v, %v; want STALE without refresh", r, err)
	}
	// With 1 ms or less of its hard TTL left (Redis keeps a key until its
	// clock is past the expiry), a stale entry is no entry: the lease is
	// tokE's, so WAIT, not STALE.
	rdb.PExpire(ctx, n.Entry, time.Millisecond)
	r, err = s.fetch(ctx, n, fetchArgs{token: "tokG", leaseTTL: lt, x: 0})
	if err != nil || r.Kind != wire.Wait {
		t.Fatalf("fetch at the hard expiry = %+v, %v; want WAIT (no entry), not STALE", r, err)
	}
}

func TestFetchScriptNegativeAndEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := testStore(t)
	for _, tc := range []struct {
		key   string
		value []byte
		kind  wire.Kind
	}{
		{"empty", []byte{}, wire.Value},
		{"missing", []byte{}, wire.NotFound},
		{"failed", []byte("db down"), wire.Failure},
		{"bin", []byte{0, 255, '{', '}', 0}, wire.Value},
	} {
		n := wire.NewNames("corral", tc.key)
		if r, _ := s.fetch(ctx, n, fetchArgs{token: "t", leaseTTL: time.Second, x: 0}); r.Kind != wire.Load {
			t.Fatalf("%s: want LOAD, got %+v", tc.key, r)
		}
		w := entryWrite{value: tc.value, kind: tc.kind, soft: time.Minute, hard: time.Minute}
		if ok, err := s.commit(ctx, n, "t", w); !ok || err != nil {
			t.Fatalf("%s: commit = %v, %v", tc.key, ok, err)
		}
		r, err := s.fetch(ctx, n, fetchArgs{token: "t2", leaseTTL: time.Second, x: 0})
		if err != nil || r.Kind != wire.Hit || string(r.Payload) != string(tc.value) || r.Flags.Kind != tc.kind {
			t.Fatalf("%s: fetch = %+v, %v", tc.key, r, err)
		}
	}
}

func TestRenewScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	n := wire.NewNames("corral", "k")
	r, _ := s.fetch(ctx, n, fetchArgs{token: "tok", leaseTTL: 200 * time.Millisecond, x: 0})
	l := &lease{token: "tok", serverNow: r.Now, at: time.Now()}
	ends := r.Now + 200 // the lease's deadline

	if res, err := s.renew(ctx, n, holder{token: "tok", deadline: ends}, time.Minute, l.serverDeadline(time.Second)); err != nil || res != wire.Renewed {
		t.Fatalf("renew by holder = %v, %v", res, err)
	}
	if pttl := rdb.PTTL(ctx, n.Lease).Val(); pttl < 50*time.Second {
		t.Fatalf("PTTL after renew = %v", pttl)
	}
	if res, _ := s.renew(ctx, n, holder{token: "other", deadline: ends}, time.Hour, l.serverDeadline(time.Second)); res != wire.RenewLost {
		t.Fatalf("renew by non-holder = %v, want wire.RenewLost", res)
	}
	// A renewal whose deadline has passed on the server clock is dropped.
	if res, _ := s.renew(ctx, n, holder{token: "tok", deadline: ends}, time.Hour, r.Now-1); res != wire.RenewLate {
		t.Fatalf("late renew = %v, want wire.RenewLate", res)
	}
	if pttl := rdb.PTTL(ctx, n.Lease).Val(); pttl > time.Minute {
		t.Fatalf("a late or foreign renewal extended the lease: PTTL %v", pttl)
	}
	// release: only by the holder.
	if ok, _ := s.release(ctx, n, "other", releaseArgs{notice: wire.Recheck}); ok {
		t.Fatal("release by non-holder succeeded")
	}
	if ok, _ := s.release(ctx, n, "tok", releaseArgs{notice: wire.Recheck}); !ok {
		t.Fatal("release by holder failed")
	}
	if res, _ := s.renew(ctx, n, holder{token: "tok", deadline: l.serverDeadline(time.Minute)}, time.Hour, l.serverDeadline(time.Second)); res != wire.RenewLost {
		t.Fatalf("renew after release = %v, want wire.RenewLost (the hand-back left a revocation marker)", res)
	}
}

// A lease missing before its deadline was evicted, not revoked: a renewal
// takes it again, and a commit stands, while the entry is the one the lease
// was taken over. Past the deadline, or over a changed entry, it is lost.
func TestEvictedLeaseScripts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	w := entryWrite{value: []byte("v"), soft: time.Minute, hard: time.Minute}
	take := func(key, token string) (wire.Names, *lease) {
		t.Helper()
		n := wire.NewNames("corral", key)
		r, err := s.fetch(ctx, n, fetchArgs{token: token, leaseTTL: time.Minute, x: 0})
		if err != nil || r.Kind != wire.Load {
			t.Fatalf("fetch %s = %+v, %v; want LOAD", key, r, err)
		}
		return n, &lease{token: token, serverNow: r.Now, at: time.Now()}
	}
	ends := func(l *lease) int64 { return l.serverNow + time.Minute.Milliseconds() }

	// Renewal: taken again before the deadline, lost after it.
	n, l := take("renew", "tok")
	rdb.Del(ctx, n.Lease)
	if res, err := s.renew(ctx, n, holder{token: "tok", deadline: ends(l)}, time.Minute, l.serverDeadline(time.Second)); err != nil || res != wire.RenewRetaken {
		t.Fatalf("renew of an evicted lease = %v, %v; want wire.RenewRetaken", res, err)
	}
	if got := rdb.Get(ctx, n.Lease).Val(); got != "tok" {
		t.Fatalf("lease after wire.RenewRetaken = %q; want tok", got)
	}
	rdb.Del(ctx, n.Lease)
	if res, _ := s.renew(ctx, n, holder{token: "tok", deadline: l.serverNow - 1}, time.Minute, l.serverDeadline(time.Second)); res != wire.RenewLost {
		t.Fatalf("renew of a lease missing past its deadline = %v; want wire.RenewLost", res)
	}

	// Commit: stands over a missing lease before the deadline; not after
	// it, nor when the token must hold the lease (deadline 0).
	n, l = take("commit", "tok")
	rdb.Del(ctx, n.Lease)
	for _, h := range []holder{{token: "tok", deadline: l.serverNow - 1}, {token: "tok"}} {
		if res, err := s.commitHeld(ctx, n, h, w); err != nil || res != wire.CommitRejected {
			t.Fatalf("commit %+v over a missing lease = %v, %v; want rejected", h, res, err)
		}
	}
	if res, err := s.commitHeld(ctx, n, holder{token: "tok", deadline: ends(l)}, w); err != nil || res != wire.CommitEvicted {
		t.Fatalf("commit over an evicted lease = %v, %v; want wire.CommitEvicted", res, err)
	}
	if res, _ := s.commitHeld(ctx, n, holder{token: "tok", deadline: ends(l)}, w); res != wire.CommitStored {
		t.Fatalf("the same commit sent again = %v; want wire.CommitStored (it landed)", res)
	}

	// A newer holder stored meanwhile (the entry changed): rejected.
	n, l = take("newer", "old")
	rdb.Del(ctx, n.Lease)
	_, l2 := take("newer", "new")
	s.commit(ctx, n, l2.token, w)
	if res, _ := s.renew(ctx, n, holder{token: "old", deadline: ends(l)}, time.Minute, l.serverDeadline(time.Second)); res != wire.RenewLost {
		t.Fatalf("renewal after a newer holder stored = %v; want wire.RenewLost", res)
	}
	if res, _ := s.commitHeld(ctx, n, holder{token: "old", deadline: ends(l)}, w); res != wire.CommitRejected {
		t.Fatalf("commit after a newer holder stored = %v; want rejected", res)
	}

	// A refresh lease (taken over an entry): stands while the entry is the
	// one it saw.
	n = wire.NewNames("corral", "refresh")
	s.commit(ctx, n, "", entryWrite{value: []byte("old"), soft: time.Millisecond, hard: time.Minute})
	var r wire.FetchReply
	eventually(t, 5*time.Second, func() bool {
		r, _ = s.fetch(ctx, n, fetchArgs{token: "ref", leaseTTL: time.Minute, x: 0})
		return r.Kind == wire.Stale && r.Refresh
	})
	rdb.Del(ctx, n.Lease)
	h := holder{token: "ref", deadline: r.Now + time.Minute.Milliseconds(), seen: r.Soft - 1}
	if res, _ := s.commitHeld(ctx, n, h, w); res != wire.CommitRejected {
		t.Fatalf("commit over another entry = %v; want rejected", res)
	}
	h.seen = r.Soft
	if res, _ := s.commitHeld(ctx, n, h, w); res != wire.CommitEvicted {
		t.Fatalf("refresh commit over an evicted lease = %v; want wire.CommitEvicted", res)
	}
}

// Delete and Set revoke a lease with a marker that outlives it, not by
// deleting it; a caller takes the lease over the marker at once (LOAD,
// never WAIT), and the revoked holder's commit is rejected, even with a
// deadline that would accept a missing lease. A hand-back without an entry
// leaves a marker too; with an entry it deletes the lease.
func TestRevocationMarker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	w := entryWrite{value: []byte("old"), soft: time.Minute, hard: time.Minute}
	for _, revoke := range []string{"delete", "set"} {
		n := wire.NewNames("corral", revoke)
		r, _ := s.fetch(ctx, n, fetchArgs{token: "tok", leaseTTL: 2 * s.leaseTTL, x: 0})
		h := holder{token: "tok", deadline: r.Now + 2*s.leaseTTL.Milliseconds()}
		if revoke == "delete" {
			if err := s.delete(ctx, n); err != nil {
				t.Fatal(err)
			}
		} else if _, err := s.commit(ctx, n, "", entryWrite{value: []byte("new"), soft: time.Minute, hard: time.Minute, took: 40 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		if got := rdb.Get(ctx, n.Lease).Val(); got != wire.Marker {
			t.Fatalf("%s: lease = %q; want the marker", revoke, got)
		}
		if pttl := rdb.PTTL(ctx, n.Lease).Val(); pttl <= s.leaseTTL {
			t.Fatalf("%s: marker PTTL %v; want the lease's (over LeaseTTL %v)", revoke, pttl, s.leaseTTL)
		}
		if res, _ := s.commitHeld(ctx, n, h, w); res != wire.CommitRejected {
			t.Fatalf("%s: the revoked holder's commit = %v; want rejected", revoke, res)
		}
	}
	n := wire.NewNames("corral", "delete")
	if r, _ := s.fetch(ctx, n, fetchArgs{token: "next", leaseTTL: time.Minute, x: 0}); r.Kind != wire.Load {
		t.Fatalf("fetch over a marker = %+v; want LOAD", r)
	}
	if ok, _ := s.release(ctx, n, "next", releaseArgs{notice: wire.Recheck}); !ok {
		t.Fatal("release failed")
	}
	if got := rdb.Get(ctx, n.Lease).Val(); got != wire.Marker {
		t.Fatalf("lease after a hand-back without an entry = %q; want the marker", got)
	}
	n = wire.NewNames("corral", "set")
	if r, _ := s.fetch(ctx, n, fetchArgs{token: "ref", leaseTTL: time.Minute, x: 1e9}); !r.Refresh {
		t.Fatalf("XFetch over a marker = %+v; want the lease taken to refresh", r)
	}
	if ok, _ := s.release(ctx, n, "ref", releaseArgs{}); !ok {
		t.Fatal("release of the refresh lease failed")
	}
	if rdb.Exists(ctx, n.Lease).Val() != 0 {
		t.Fatal("a hand-back with an entry left the lease")
	}
}

// A failed refresh hands the lease back as a backoff marker for the hold and
// flags the entry; the stale entry itself is kept.
func TestReleaseScriptHoldsAndMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	n := wire.NewNames("corral", "k")
	s.fetch(ctx, n, fetchArgs{token: "t1", leaseTTL: time.Second, x: 0})
	s.commit(ctx, n, "t1", entryWrite{value: []byte("v"), soft: time.Millisecond, hard: time.Minute})
	eventually(t, time.Second, func() bool {
		r, _ := s.fetch(ctx, n, fetchArgs{token: "t2", leaseTTL: time.Second, x: 0})
		return r.Kind == wire.Stale && r.Refresh
	})
	if ok, _ := s.release(ctx, n, "t2", releaseArgs{hold: 300 * time.Millisecond, mark: true}); !ok {
		t.Fatal("release by holder failed")
	}
	if got := rdb.Get(ctx, n.Lease).Val(); got != "backoff" {
		t.Fatalf("lease after a held release = %q, want the backoff marker", got)
	}
	if pttl := rdb.PTTL(ctx, n.Lease).Val(); pttl <= 0 || pttl > 300*time.Millisecond {
		t.Fatalf("backoff PTTL = %v", pttl)
	}
	r, _ := s.fetch(ctx, n, fetchArgs{token: "t3", leaseTTL: time.Second, x: 0})
	if r.Kind != wire.Stale || r.Refresh || !r.Flags.RefreshFailed || string(r.Payload) != "v" {
		t.Fatalf("fetch during the backoff = %+v; want STALE, no refresh, flagged", r)
	}
	// The next successful commit clears the flag.
	eventually(t, time.Second, func() bool {
		r, _ := s.fetch(ctx, n, fetchArgs{token: "t4", leaseTTL: time.Second, x: 0})
		return r.Refresh
	})
	s.commit(ctx, n, "t4", entryWrite{value: []byte("v2"), soft: time.Minute, hard: time.Minute})
	if r, _ := s.fetch(ctx, n, fetchArgs{token: "t5", leaseTTL: time.Second, x: 0}); r.Flags.RefreshFailed || string(r.Payload) != "v2" {
		t.Fatalf("after a good commit: %+v", r)
	}
}

func eventually(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, within, "the condition", cond)
}

func TestDeleteScriptRevokesLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	n := wire.NewNames("corral", "k")
	s.fetch(ctx, n, fetchArgs{token: "tok", leaseTTL: time.Minute, x: 0})
	if err := s.delete(ctx, n); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, n.Entry).Val() != 0 || rdb.Get(ctx, n.Lease).Val() != wire.Marker {
		t.Fatal("delete left the entry, or the lease not revoked")
	}
	w := entryWrite{value: []byte("old"), soft: time.Minute, hard: time.Minute}
	if ok, _ := s.commit(ctx, n, "tok", w); ok {
		t.Fatal("a load that started before Delete committed after it")
	}
}

func TestPublishDetection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := testStore(t)
	if pub, err := s.publishCommand(ctx); err != nil || pub != "SPUBLISH" {
		t.Fatalf("Redis 7: publish = %q, %v; want SPUBLISH", pub, err)
	}
	// A server without sharded pub/sub (Redis 6, or SPUBLISH renamed away).
	s, _ = testStore(t, "--rename-command", "SPUBLISH", "")
	if pub, err := s.publishCommand(ctx); err != nil || pub != "PUBLISH" {
		t.Fatalf("no SPUBLISH: publish = %q, %v; want PUBLISH", pub, err)
	}
	s, _ = testStore(t)
	s.start = startup.New(s.pipe, "corral:probe", true, true) // DisableShardedPubSub
	s.mode = s.start.Mode
	if pub, _ := s.publishCommand(ctx); pub != "PUBLISH" {
		t.Fatalf("DisableShardedPubSub: publish = %q; want PUBLISH", pub)
	}
}

func TestSlotTag(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"user:{42}:p": "42",
		"{a}{b}":      "a",
		"x{}y{z}":     "", // the first '{' has an empty tag: the whole key hashes
		"}z{w}":       "w",
		"{":           "",
		"plain":       "",
	} {
		got, ok := wire.HashTag(key)
		if want == "" {
			if ok {
				t.Errorf("wire.HashTag(%q) = %q, want none", key, got)
			}
			if tag := wire.SlotTag(key); len(tag) != 16 {
				t.Errorf("wire.SlotTag(%q) = %q, want a 16-digit hash", key, tag)
			}
			continue
		}
		if got != want || wire.SlotTag(key) != want {
			t.Errorf("wire.HashTag(%q) = %q, want %q", key, got, want)
		}
	}
	n := wire.NewNames("p", "user:{42}:p")
	if n.Entry != "p:e:{42}:user:{42}:p" || n.Lease != "p:l:{42}:user:{42}:p" || n.Notice != "p:n:{42}:user:{42}:p" {
		t.Fatalf("names = %+v", n)
	}
}

// A client that resends fetch.lua after losing its reply (a dropped
// connection: go-redis retries) finds the lease holding its own token and
// loads, instead of waiting on itself.
func TestFetchScriptRetryKeepsOwnLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := testStore(t)
	n := wire.NewNames("corral", "k")
	if r, _ := s.fetch(ctx, n, fetchArgs{token: "mine", leaseTTL: time.Second, x: 0}); r.Kind != wire.Load {
		t.Fatalf("first fetch = %+v", r)
	}
	if r, _ := s.fetch(ctx, n, fetchArgs{token: "mine", leaseTTL: time.Second, x: 0}); r.Kind != wire.Load {
		t.Fatalf("resent fetch = %+v, want LOAD again", r)
	}
	if r, _ := s.fetch(ctx, n, fetchArgs{token: "theirs", leaseTTL: time.Second, x: 0}); r.Kind != wire.Wait {
		t.Fatalf("another token's fetch = %+v, want WAIT", r)
	}
}

// A leased commit stores the earlier of its softBy and now + TTL as the
// entry's soft expiry, the stale window after it: the time a commit spends
// on its way to Redis never lengthens a TTL the loader set.
func TestCommitSoftExpiryCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	for _, tc := range []struct {
		name   string
		softBy func(now int64) int64
		capped bool
	}{
		{"cap earlier than now + TTL", func(now int64) int64 { return now + 30_000 }, true},
		{"cap later than now + TTL", func(now int64) int64 { return now + 600_000 }, false},
		{"no cap", func(int64) int64 { return 0 }, false},
	} {
		n := wire.NewNames("corral", "cap:"+tc.name)
		r, err := s.fetch(ctx, n, fetchArgs{token: "tok", leaseTTL: time.Minute, x: 0})
		if err != nil || r.Kind != wire.Load {
			t.Fatalf("%s: fetch = %+v, %v; want LOAD", tc.name, r, err)
		}
		w := entryWrite{value: []byte("v"), soft: time.Minute, hard: 2 * time.Minute}
		h := holder{token: "tok", softBy: tc.softBy(r.Now)}
		if res, err := s.commitHeld(ctx, n, h, w); err != nil || res != wire.CommitStored {
			t.Fatalf("%s: commit = %v, %v", tc.name, res, err)
		}
		soft, err := rdb.HGet(ctx, n.Entry, "s").Int64()
		if err != nil {
			t.Fatal(err)
		}
		pttl := rdb.PTTL(ctx, n.Entry).Val()
		if tc.capped {
			if soft != h.softBy {
				t.Fatalf("%s: soft expiry %d; want the cap %d", tc.name, soft, h.softBy)
			}
			// The stale window (1 min) follows the capped expiry: about 90 s left.
			if pttl > 90*time.Second || pttl < 80*time.Second {
				t.Fatalf("%s: PTTL %v; want the cap plus the stale window, about 90s", tc.name, pttl)
			}
			continue
		}
		if soft < r.Now+time.Minute.Milliseconds() || soft > r.Now+time.Minute.Milliseconds()+5_000 {
			t.Fatalf("%s: soft expiry %d; want now + TTL, about %d", tc.name, soft, r.Now+time.Minute.Milliseconds())
		}
		if pttl < 110*time.Second {
			t.Fatalf("%s: PTTL %v; want the hard TTL, about 2m", tc.name, pttl)
		}
	}
}

// renew extends h's lease by ttl, as the Watchdog's rounds do
// (internal/renewal, renew.lua), unless it reaches the server after
// deadline (server ms).
func (s *store) renew(ctx context.Context, n wire.Names, h holder, ttl time.Duration, deadline int64) (wire.Renewal, error) {
	r := renewal.Send(ctx, s.pipe, ttl, []watchdog.Renewal{{Held: h.deadline, Deadline: deadline,
		Lease: &watchdog.Lease{Key: n.Lease, Entry: n.Entry, Token: h.token, Seen: h.seen}}})[0]
	if r.Err != nil {
		return wire.RenewLost, r.Err
	}
	return r.Res, nil
}

// With no node tripped, a call's check for one (skipped) costs no
// allocation, not even its entry's name: every call makes it.
func TestSkippedCostsNothing(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New(srv.Client(), &Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// AllocsPerRun counts the process's allocations: the Cache's start-up
	// (its pub/sub connection dialled) must be over, as a loaded machine once
	// had it overlap the runs.
	if err := c.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { c.skipped("user:42") }); n != 0 {
		t.Fatalf("skipped makes %v allocations with no node tripped; want none", n)
	}
}
