package corral_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/wire"
)

// On a Cluster, tags span slots and keys span masters: InvalidateTags and
// Clear work without CROSSSLOT, in the calling process at once and in
// another within Coherence.
func TestClusterInvalidateTags(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	a, b := newCache(t, cl.Client(), nil), newCache(t, cl.Client(), nil)
	ctx := context.Background()
	const keys = 60
	var loads [keys]atomic.Int32
	load := func(i int) func(context.Context) (corral.Entry, error) {
		return func(context.Context) (corral.Entry, error) {
			n := loads[i].Add(1)
			return corral.Entry{Value: []byte(fmt.Sprint(n)), TTL: time.Minute,
				Tags: []string{fmt.Sprintf("tag-%d", i%6), "all"}}, nil
		}
	}
	key := func(i int) string { return fmt.Sprintf("key-%d", i) }
	for _, c := range []*corral.Cache{a, b} {
		for i := range keys {
			if _, err := c.FetchEntry(ctx, key(i), load(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.InvalidateTags(ctx, "tag-1", "tag-4"); err != nil {
		t.Fatalf("InvalidateTags on a Cluster: %v", err)
	}
	for i := range keys {
		want := "1"
		if i%6 == 1 || i%6 == 4 {
			want = "2"
		}
		if v, err := a.FetchEntry(ctx, key(i), load(i)); err != nil || string(v) != want {
			t.Fatalf("%s after InvalidateTags = %q, %v; want %s", key(i), v, err, want)
		}
	}
	if v := afterCoherence(t, b, key(1), load(1), "1"); v != "2" {
		t.Fatalf("the other process got %q; want 2", v)
	}
	if err := b.Clear(ctx); err != nil {
		t.Fatalf("Clear on a Cluster: %v", err)
	}
	for i := range keys {
		before := loads[i].Load()
		if _, err := b.FetchEntry(ctx, key(i), load(i)); err != nil || loads[i].Load() != before+1 {
			t.Fatalf("%s after Clear: %v, %d loads; want one more", key(i), err, loads[i].Load()-before)
		}
	}
}

// The master of the records fails over while invalidations are made: each
// InvalidateTags returns nil or says it was queued, and either way the
// invalidation holds once the Cluster is healthy again.
func TestClusterInvalidateTagsFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	a, b := newCache(t, cl.Client(), &corral.Options{RedisTimeout: time.Second}), newCache(t, cl.Client(), nil)
	ctx := context.Background()
	var loads atomic.Int32
	load := func(context.Context) (corral.Entry, error) {
		n := loads.Add(1)
		return corral.Entry{Value: []byte(fmt.Sprint(n)), TTL: time.Minute, Tags: []string{"fo"}}, nil
	}
	if _, err := b.FetchEntry(ctx, "k", load); err != nil {
		t.Fatal(err)
	}
	master := cl.MasterOf(wire.ClearName("corral"))
	cl.WaitReplicated(master)
	master.Kill()
	err := a.InvalidateTags(ctx, "fo")
	if err != nil && !strings.Contains(err.Error(), "queued") {
		t.Fatalf("InvalidateTags while the records' master fails over = %v; want nil or queued", err)
	}
	t.Logf("InvalidateTags during the failover: %v", err)
	cl.WaitHealthy()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, ferr := b.FetchEntry(ctx, "k", load)
		if ferr == nil && string(v) != "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the invalidation never held after the failover: %q, %v; stats %+v", v, ferr, a.Stats())
		}
		<-time.After(50 * time.Millisecond) // polling for the Cluster's recovery, bounded by the deadline
	}
	if err := a.InvalidateTags(ctx, "fo"); err != nil && !errors.Is(err, corral.ErrCircuitOpen) {
		t.Logf("InvalidateTags after the failover: %v", err)
	}
}

// A background refresh on a Cluster, by a Cache that has read no group
// records for a while (so it has no recent estimate of the records' clock),
// stores its value with its true birth, not as older than every group
// invalidation: after a Clear long before, the refreshed entry is served,
// not loaded again at once.
func TestClusterRefreshAfterIdleIsKept(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	c := newCache(t, cl.Client(), &corral.Options{StaleTTL: time.Minute, DisableJitter: true, DisableEarlyRefresh: true})
	ctx := context.Background()
	if err := c.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	refreshed := make(chan struct{}, 1)
	load := func(context.Context) ([]byte, error) {
		if loads.Add(1) == 2 {
			defer func() { refreshed <- struct{}{} }()
		}
		return []byte(fmt.Sprint(loads.Load())), nil
	}
	if v, err := c.Fetch(ctx, "{idle}", 100*time.Millisecond, load); err != nil || string(v) != "1" {
		t.Fatalf("first Fetch: %q, %v", v, err)
	}
	<-time.After(1200 * time.Millisecond) // stale, and no records read for over a second
	if v, err := c.Fetch(ctx, "{idle}", 100*time.Millisecond, load); err != nil || string(v) != "1" {
		t.Fatalf("stale Fetch: %q, %v; want 1, served stale while it refreshes", v, err)
	}
	<-refreshed
	eventually(t, 2*time.Second, "the refresh stored", func() bool {
		v, err := c.Get(ctx, "{idle}")
		return err == nil && string(v) == "2"
	})
	if v, err := c.Fetch(ctx, "{idle}", 100*time.Millisecond, load); err != nil || string(v) != "2" || loads.Load() != 2 {
		t.Fatalf("after the refresh: %q, %v, %d loads; want 2 from the refresh, no more loads", v, err, loads.Load())
	}
}
