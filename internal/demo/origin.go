package demo

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
)

// Origin is the slow source of truth the caches sit in front of: a SQL
// database holding the generated orders. Its Aggregate is the real query
// every cache miss ends in.
type Origin struct {
	// Label names the database in reports: "sqlite (embedded)" or "postgres".
	Label string

	db        *sql.DB
	aggregate string       // the per-customer query, in the database's dialect
	cleanup   func() error // runs after db is closed
}

// customerTotals is the cached value: one customer's order statistics.
type customerTotals struct {
	CustomerID int64   `json:"customer_id"`
	Orders     int64   `json:"orders"`
	TotalCents int64   `json:"total_cents"`
	AvgCents   float64 `json:"avg_cents"`
}

// openOrigin opens PostgreSQL when dsn is set, else the embedded SQLite
// database, and makes sure it holds the generated data.
func openOrigin(ctx context.Context, dsn string) (*Origin, error) {
	if dsn != "" {
		return openPostgres(ctx, dsn)
	}
	return openSQLite(ctx)
}

// Aggregate runs the per-customer aggregate and returns its JSON encoding.
// It adds no latency; the meter does.
func (o *Origin) Aggregate(ctx context.Context, customer int64) ([]byte, error) {
	t := customerTotals{CustomerID: customer}
	err := o.db.QueryRowContext(ctx, o.aggregate, customer).Scan(&t.Orders, &t.TotalCents, &t.AvgCents)
	if err != nil {
		return nil, fmt.Errorf("demo: query customer %d on %s: %w", customer, o.Label, err)
	}
	return json.Marshal(t)
}

// Close closes the database and removes what the origin created on disk.
func (o *Origin) Close() error {
	err := o.db.Close()
	if o.cleanup != nil {
		if cerr := o.cleanup(); err == nil {
			err = cerr
		}
	}
	return err
}

// insertBatch is the number of rows per INSERT while seeding: 3 parameters
// a row stays far below every database's parameter limit.
const insertBatch = 1000

// insertOrders inserts the generated orders into table with multi-row
// INSERTs; placeholder returns the dialect's n-th parameter (1-based).
func insertOrders(ctx context.Context, tx *sql.Tx, table string, placeholder func(n int) string) error {
	var (
		sb   strings.Builder
		args = make([]any, 0, 3*insertBatch)
	)
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		sb.Reset()
		sb.WriteString("INSERT INTO " + table + " (id, customer_id, amount_cents) VALUES ")
		for i := 0; i < len(args); i += 3 {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "(%s,%s,%s)", placeholder(i+1), placeholder(i+2), placeholder(i+3))
		}
		if _, err := tx.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("demo: seed %s: %w", table, err)
		}
		args = args[:0]
		return nil
	}
	err := generateOrders(func(o order) error {
		args = append(args, o.id, o.customerID, o.amountCents)
		if len(args) == cap(args) {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}
