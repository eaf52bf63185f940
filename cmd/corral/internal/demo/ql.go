package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"modernc.org/ql"
)

// qlAggregate is the per-customer aggregate in ql's dialect. avg is taken
// over float64 values: ql's avg of an int64 column is an int64.
var qlAggregate = ql.MustCompile(`SELECT count(*), sum(amount_cents), avg(float64(amount_cents))
	FROM orders WHERE customer_id == $1;`)

// qlDB is an embedded origin's database: the shared in-memory ql database
// (pure Go) holding the generated orders, indexed by customer, and the
// origin's own query slots.
type qlDB struct {
	db     *ql.DB
	pool   chan struct{} // originConns slots; a query holds one while it runs
	closed atomic.Bool
}

// embedded is the process's one embedded database, seeded by the first
// openQL and shared by every embedded origin after it: seeding takes about
// half a second (2 to 3 s under the race detector, on 2 busy cores), and
// the tests open the origin many times. It is never closed, so closing one origin
// cannot break another: an origin's Close only ends its own queries, and
// the database (about 22 MB of heap) lives until the process exits.
var embedded struct {
	mu sync.Mutex // guards db; held while seeding, so a second open waits for the first
	db *ql.DB     // nil until seeded; a failed seed leaves it nil for the next open to retry
}

// errOriginClosed is what an embedded origin's queries return after its
// Close.
var errOriginClosed = errors.New("origin closed")

// openQL opens an embedded origin on the shared database, seeding the
// database on first use.
func openQL(ctx context.Context) (*Origin, error) {
	db, err := embeddedDB(ctx)
	if err != nil {
		return nil, err
	}
	return &Origin{Label: "ql (embedded)", db: &qlDB{db: db, pool: make(chan struct{}, originConns)}}, nil
}

// embeddedDB returns the shared database, creating and seeding it first
// if no open has done so yet.
func embeddedDB(ctx context.Context) (*ql.DB, error) {
	embedded.mu.Lock()
	defer embedded.mu.Unlock()
	if embedded.db != nil {
		return embedded.db, nil
	}
	db, err := ql.OpenMem()
	if err != nil {
		return nil, fmt.Errorf("demo: ql: %w", err)
	}
	if err := seedQL(ctx, db); err != nil {
		_ = db.Close()
		return nil, err
	}
	embedded.db = db
	return db, nil
}

// seedQL creates the orders table, inserts the generated orders with
// multi-row INSERTs, then indexes them by customer, in one transaction.
func seedQL(ctx context.Context, db *ql.DB) (err error) {
	tx := ql.NewRWCtx()
	if _, _, err := db.Run(tx, `BEGIN TRANSACTION;
		CREATE TABLE orders (id int64, customer_id int64, amount_cents int64);`); err != nil {
		return fmt.Errorf("demo: ql: create table: %w", err)
	}
	defer func() {
		if err != nil {
			_, _, _ = db.Run(tx, `ROLLBACK;`)
		}
	}()
	insert := ql.MustCompile(qlInsert(insertBatch))
	args := make([]any, 0, 3*insertBatch)
	err = generateOrders(func(o order) error {
		args = append(args, o.id, o.customerID, o.amountCents)
		if len(args) < cap(args) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		_, _, err := db.Execute(tx, insert, args...)
		args = args[:0]
		return err
	})
	if err == nil && len(args) > 0 {
		_, _, err = db.Run(tx, qlInsert(len(args)/3), args...)
	}
	if err != nil {
		return fmt.Errorf("demo: ql: seed orders: %w", err)
	}
	if _, _, err := db.Run(tx, `CREATE INDEX orders_customer ON orders (customer_id); COMMIT;`); err != nil {
		return fmt.Errorf("demo: ql: create index: %w", err)
	}
	return nil
}

// qlInsert is an INSERT of rows orders, with parameters $1 to $(3*rows).
func qlInsert(rows int) string {
	var sb strings.Builder
	sb.WriteString("INSERT INTO orders VALUES ")
	for i := range rows {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "($%d, $%d, $%d)", 3*i+1, 3*i+2, 3*i+3)
	}
	sb.WriteByte(';')
	return sb.String()
}

// totals runs the aggregate once a pool slot is free. ql gives NULL for
// the sum and average of no rows; they stay 0.
func (q *qlDB) totals(ctx context.Context, customer int64) (t customerTotals, err error) {
	if q.closed.Load() {
		return t, errOriginClosed
	}
	select {
	case q.pool <- struct{}{}:
	case <-ctx.Done():
		return t, ctx.Err()
	}
	defer func() { <-q.pool }()
	rs, _, err := q.db.Execute(nil, qlAggregate, customer)
	if err != nil {
		return t, err
	}
	row, err := rs[0].FirstRow()
	if err != nil {
		return t, err
	}
	if len(row) != 3 {
		return t, fmt.Errorf("aggregate gave %d columns, want 3", len(row))
	}
	var ok [3]bool
	t.Orders, ok[0] = row[0].(int64)
	t.TotalCents, ok[1] = row[1].(int64)
	t.AvgCents, ok[2] = row[2].(float64)
	if !ok[0] || !ok[1] && row[1] != nil || !ok[2] && row[2] != nil {
		return t, fmt.Errorf("aggregate gave %T, %T, %T; want int64, int64, float64", row[0], row[1], row[2])
	}
	return t, nil
}

// Close makes the origin's later queries fail with errOriginClosed; the
// shared database stays open for the other origins.
func (q *qlDB) Close() error {
	q.closed.Store(true)
	return nil
}
