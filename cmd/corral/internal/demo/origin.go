package demo

import (
	"context"
	"encoding/json"
	"fmt"
)

// Origin is the slow source of truth the caches sit in front of: a SQL
// database holding the generated orders. Its Aggregate is the real query
// every cache miss ends in.
type Origin struct {
	// Label names the database in reports: "ql (embedded)" or "postgres".
	Label string

	db database
}

// database is what an origin needs of its database: the per-customer
// aggregate, safe for concurrent use, and Close.
type database interface {
	totals(ctx context.Context, customer int64) (customerTotals, error)
	Close() error
}

// customerTotals is the cached value: one customer's order statistics.
type customerTotals struct {
	CustomerID int64   `json:"customer_id"`
	Orders     int64   `json:"orders"`
	TotalCents int64   `json:"total_cents"`
	AvgCents   float64 `json:"avg_cents"`
}

// openOrigin opens PostgreSQL when dsn is set, else the embedded ql
// database, and makes sure it holds the generated data.
func openOrigin(ctx context.Context, dsn string) (*Origin, error) {
	if dsn != "" {
		return openPostgres(ctx, dsn)
	}
	return openQL(ctx)
}

// Aggregate runs the per-customer aggregate and returns its JSON encoding.
// It adds no latency; the meter does.
func (o *Origin) Aggregate(ctx context.Context, customer int64) ([]byte, error) {
	t, err := o.db.totals(ctx, customer)
	if err != nil {
		return nil, fmt.Errorf("demo: query customer %d on %s: %w", customer, o.Label, err)
	}
	t.CustomerID = customer
	return json.Marshal(t)
}

// Close closes the database.
func (o *Origin) Close() error { return o.db.Close() }

// originConns bounds the queries an origin runs at once, as an
// application's database pool would: PostgreSQL's pool has this many
// connections, the embedded database this many query slots. Queries beyond
// it queue.
const originConns = 16

// insertBatch is the number of rows per INSERT while seeding: 3 parameters
// a row stays far below every database's parameter limit.
const insertBatch = 1000
