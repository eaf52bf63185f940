package corral

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/renewal"
	"github.com/corralhq/corral/internal/watchdog"
	"github.com/corralhq/corral/internal/wire"
)

// The scripts' side of group leases (internal/scripts' lease.lua): a
// FetchMany's key's lease names its batch's group lease, lives while the
// group does, whatever its own PX, and stands on its own value alone when
// committed.
func TestGroupLeaseScripts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb := testStore(t)
	lt := 2 * time.Second
	g := wire.NewGroup("corral", "batch1", "k", false, time.Minute)
	member := func(tok string) fetchArgs {
		return fetchArgs{token: wire.Member(tok, g.Name), leaseTTL: lt, group: g}
	}
	n := wire.NewNames("corral", "k")

	// A member's grant makes the group (PX LeaseTTL) and gives the member
	// its own, longer PX.
	r, err := s.fetch(ctx, n, member("sA"))
	if err != nil || r.Kind != wire.Load {
		t.Fatalf("member's cold fetch = %+v, %v; want LOAD", r, err)
	}
	if got := rdb.Get(ctx, g.Name).Val(); got != "batch1" {
		t.Fatalf("group = %q, want the batch's token", got)
	}
	if pttl := rdb.PTTL(ctx, g.Name).Val(); pttl <= 0 || pttl > lt {
		t.Fatalf("group PTTL = %v, want (0, %v]", pttl, lt)
	}
	if pttl := rdb.PTTL(ctx, n.Lease).Val(); pttl <= lt || pttl > time.Minute {
		t.Fatalf("member PTTL = %v, want (%v, 1m]", pttl, lt)
	}

	// Another caller waits for the group's time, not the member's.
	r, err = s.fetch(ctx, n, fetchArgs{token: "sB", leaseTTL: lt})
	if err != nil || r.Kind != wire.Wait || r.PTTL <= 0 || r.PTTL > lt || r.Holder != wire.AnnounceSharded {
		t.Fatalf("fetch while a member holds = %+v, %v; want WAIT for at most %v, the holder announcing as its token says", r, err, lt)
	}

	// The group gone (its process died): the member is no lease, and the
	// next caller takes it at once, though the member's own PX lasts.
	rdb.Del(ctx, g.Name)
	r, err = s.fetch(ctx, n, fetchArgs{token: "sB", leaseTTL: lt})
	if err != nil || r.Kind != wire.Load {
		t.Fatalf("fetch over a dead group's member = %+v, %v; want LOAD", r, err)
	}
	w := entryWrite{value: []byte("v"), soft: time.Minute, hard: time.Minute}
	if ok, err := s.commit(ctx, n, wire.Member("sA", g.Name), w); err != nil || ok {
		t.Fatalf("the taken-over member's commit = %v, %v; want rejected", ok, err)
	}
	if ok, err := s.commit(ctx, n, "sB", w); err != nil || !ok {
		t.Fatalf("the new holder's commit = %v, %v; want stored", ok, err)
	}

	// A member whose group is gone, but whose lease nobody took, still
	// commits: nobody revoked it, nobody else loads.
	n2 := wire.NewNames("corral", "k2")
	g2 := wire.NewGroup("corral", "batch2", "k2", false, time.Minute)
	tok := wire.Member("sC", g2.Name)
	if r, err := s.fetch(ctx, n2, fetchArgs{token: tok, leaseTTL: lt, group: g2}); err != nil || r.Kind != wire.Load {
		t.Fatalf("fetch = %+v, %v; want LOAD", r, err)
	}
	rdb.Del(ctx, g2.Name)
	if res, err := s.commitHeld(ctx, n2, holder{token: tok}, w); err != nil || res != wire.CommitStored {
		t.Fatalf("commit of a member whose group is gone = %v, %v; want stored", res, err)
	}

	// A Delete revokes a member though its group lives on (renewed for the
	// batch's other keys): its commit is rejected, and stays rejected once
	// the revocation's marker has expired, however late the group's
	// deadline.
	n3 := wire.NewNames("corral", "k3")
	g3 := wire.NewGroup("corral", "batch3", "k3", false, time.Minute)
	tok = wire.Member("sD", g3.Name)
	if r, err := s.fetch(ctx, n3, fetchArgs{token: tok, leaseTTL: lt, group: g3}); err != nil || r.Kind != wire.Load {
		t.Fatalf("fetch = %+v, %v; want LOAD", r, err)
	}
	if err := s.delete(ctx, n3); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, n3.Lease).Val(); pttl > s.leaseTTL {
		t.Fatalf("the revocation marker over a member lives %v, want at most LeaseTTL (%v), not the member's own PX", pttl, s.leaseTTL)
	}
	late := time.Now().Add(time.Hour).UnixMilli()
	if res, err := s.commitHeld(ctx, n3, holder{token: tok, deadline: late}, w); err != nil || res != wire.CommitRejected {
		t.Fatalf("revoked member's commit = %v, %v; want rejected", res, err)
	}
	rdb.Del(ctx, n3.Lease) // the marker expired
	if res, err := s.commitHeld(ctx, n3, holder{token: tok, deadline: late}, w); err != nil || res != wire.CommitRejected {
		t.Fatalf("revoked member's commit after its marker expired = %v, %v; want rejected (a member is never taken for evicted)", res, err)
	}
	if rdb.Exists(ctx, n3.Entry).Val() != 0 {
		t.Fatal("a revoked member's load was stored after the Delete")
	}

	// A member held past half its own PX is renewed on its own, by its PX
	// (internal/watchdog); found missing (a revocation's marker expired),
	// it is lost, never taken again.
	n5 := wire.NewNames("corral", "k5")
	g5 := wire.NewGroup("corral", "batch5", "k5", false, 10*time.Second)
	tok = wire.Member("sF", g5.Name)
	if r, err := s.fetch(ctx, n5, fetchArgs{token: tok, leaseTTL: lt, group: g5}); err != nil || r.Kind != wire.Load {
		t.Fatalf("fetch = %+v, %v; want LOAD", r, err)
	}
	rdb.PExpire(ctx, n5.Lease, time.Second)
	renew := func() watchdog.Reply {
		l := &watchdog.Lease{Key: n5.Lease, Entry: n5.Entry, Token: tok, TTL: g5.PX}
		return renewal.Send(ctx, s.pipe, lt, []watchdog.Renewal{{Lease: l, Held: 0, Deadline: time.Now().Add(time.Hour).UnixMilli()}})[0]
	}
	if r := renew(); r.Err != nil || r.Res != wire.Renewed || rdb.PTTL(ctx, n5.Lease).Val() <= 5*time.Second {
		t.Fatalf("a member's own renewal = %+v, PTTL %v; want renewed by its PX", r, rdb.PTTL(ctx, n5.Lease).Val())
	}
	rdb.Del(ctx, n5.Lease)
	if r := renew(); r.Err != nil || r.Res != wire.RenewLost || rdb.Exists(ctx, n5.Lease).Val() != 0 {
		t.Fatalf("a missing member's renewal = %+v; want lost, and not taken again", r)
	}

	// The same member asking again (its client resent the script) holds
	// it still, and makes its group again if it was gone.
	n4 := wire.NewNames("corral", "k4")
	g4 := wire.NewGroup("corral", "batch4", "k4", false, time.Minute)
	tok = wire.Member("sE", g4.Name)
	for range 2 {
		if r, err := s.fetch(ctx, n4, fetchArgs{token: tok, leaseTTL: lt, group: g4}); err != nil || r.Kind != wire.Load {
			t.Fatalf("fetch = %+v, %v; want LOAD", r, err)
		}
		rdb.Del(ctx, g4.Name)
	}
}
