package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
)

// TestWarmNearCache warms corral-near's instances on a real redis-server as
// redis-outage-warm does: afterwards every instance answers every key from
// its near cache, and the warm-up loaded each key once.
func TestWarmNearCache(t *testing.T) {
	ctx := context.Background()
	srv, err := startServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sc := *scenarios(true)[0]
	sc.Instances, sc.Keys, sc.Warm = 3, 4, true
	sys, _ := lookupSystem("corral-near")
	r := &runner{srv: srv, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	vals := newValues(64)
	o := &origin{values: vals}
	insts, closeAll, err := r.instances(ctx, &sc, sys, o, nil, "warm:", sc.Instances)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if err := r.warm(ctx, &sc, insts, vals, "warm:"); err != nil {
		t.Fatal(err)
	}
	if n := o.restartCount(); n != int64(sc.Keys) {
		t.Errorf("the warm-up loaded %d times for %d keys", n, sc.Keys)
	}
	for i, in := range insts {
		c := in.(*corralInstance)
		before := c.cache.Stats().NearHits
		for k := range sc.Keys {
			v, err := c.Fetch(ctx, "warm:"+keyName(k))
			if err := check(v, err, keyName(k), vals); err != nil {
				t.Fatal(err)
			}
		}
		if hits := c.cache.Stats().NearHits - before; hits != uint64(sc.Keys) {
			t.Errorf("instance %d: %d near hits of %d keys after the warm-up", i, hits, sc.Keys)
		}
	}
	if o.loads.Load() != 0 {
		t.Errorf("%d loads after the warm-up", o.loads.Load())
	}
}
