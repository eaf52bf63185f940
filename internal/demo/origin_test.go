package demo

import (
	"context"
	"encoding/json"
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
