package demo

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// TestEmbeddedOriginAggregates checks the embedded origin's aggregate
// against the generated data, for every customer and for one with no
// orders.
func TestEmbeddedOriginAggregates(t *testing.T) {
	want := make(map[int64]customerTotals)
	_ = generateOrders(func(o order) error {
		w := want[o.customerID]
		w.CustomerID = o.customerID
		w.Orders++
		w.TotalCents += o.amountCents
		want[o.customerID] = w
		return nil
	})
	for id, w := range want {
		w.AvgCents = float64(w.TotalCents) / float64(w.Orders)
		want[id] = w
	}
	want[customers+1] = customerTotals{CustomerID: customers + 1}

	ctx := context.Background()
	o, err := openOrigin(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.Label != "ql (embedded)" {
		t.Errorf("Label = %q, want ql (embedded)", o.Label)
	}
	for id, w := range want {
		b, err := o.Aggregate(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var got customerTotals
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("customer %d: %v in %s", id, err, b)
		}
		if got != w {
			t.Fatalf("customer %d: %+v, want %+v", id, got, w)
		}
	}
}

// TestEmbeddedOriginShared checks that embedded origins share one seeded
// database and that closing one leaves the others working.
func TestEmbeddedOriginShared(t *testing.T) {
	ctx := context.Background()
	a, err := openOrigin(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openOrigin(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.db.(*qlDB).db != b.db.(*qlDB).db {
		t.Fatal("two embedded origins have databases of their own")
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, err := b.Aggregate(ctx, 1); !errors.Is(err, errOriginClosed) {
		t.Errorf("Aggregate after Close = %v, want errOriginClosed", err)
	}
	if _, err := a.Aggregate(ctx, 1); err != nil {
		t.Errorf("Aggregate on the other origin after one's Close = %v", err)
	}
	c, err := openOrigin(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Aggregate(ctx, 1); err != nil {
		t.Errorf("Aggregate on an origin opened after one's Close = %v", err)
	}
}

// TestEmbeddedOriginQueues checks that a query beyond the origin's
// originConns slots waits for one, and gives up with its context.
func TestEmbeddedOriginQueues(t *testing.T) {
	o, err := openOrigin(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	pool := o.db.(*qlDB).pool
	for range originConns {
		pool <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := o.Aggregate(ctx, 1)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Aggregate with every slot taken = %v, want context.Canceled", err)
	}
	<-pool
	if _, err := o.Aggregate(context.Background(), 1); err != nil {
		t.Fatalf("Aggregate with a slot free = %v", err)
	}
}
