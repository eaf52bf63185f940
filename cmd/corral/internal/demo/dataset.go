package demo

import (
	"math/rand/v2"
	"strconv"
)

// The generated data set: orders rows spread over customers, the same on
// every run and in every database (a fixed PCG seed).
const (
	orders    = 100_000
	customers = 2_000
	seedHi    = 0xC0FFEE
	seedLo    = 2026
)

// order is one generated row of the orders table.
type order struct {
	id          int64
	customerID  int64
	amountCents int64
}

// generateOrders calls f for every row, in id order; it stops early when f
// returns an error and returns that error.
func generateOrders(f func(order) error) error {
	r := rand.New(rand.NewPCG(seedHi, seedLo))
	for id := int64(1); id <= orders; id++ {
		o := order{
			id:          id,
			customerID:  1 + r.Int64N(customers),
			amountCents: 100 + r.Int64N(50_000), // 1.00 to 500.99
		}
		if err := f(o); err != nil {
			return err
		}
	}
	return nil
}

// dataFingerprint is the row count and the sum of amounts of the generated
// data, so a database seeded by an earlier run can be recognised.
func dataFingerprint() (rows, sumCents int64) {
	_ = generateOrders(func(o order) error {
		rows++
		sumCents += o.amountCents
		return nil
	})
	return rows, sumCents
}

// hotKey is the i-th hot key (0-based): a customer whose orders make the
// cached value. Keys spread over the customer ids (977 is prime to the
// number of customers, so the first `customers` keys are all different).
type hotKey struct {
	name     string // the logical cache key, "customer:<id>"
	customer int64
}

func hotKeys(n int) []hotKey {
	keys := make([]hotKey, n)
	for i := range keys {
		id := 1 + int64(i*977%customers)
		keys[i] = hotKey{name: "customer:" + strconv.FormatInt(id, 10), customer: id}
	}
	return keys
}
