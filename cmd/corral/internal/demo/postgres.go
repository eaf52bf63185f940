package demo

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	_ "github.com/lib/pq" // the "postgres" database/sql driver
)

// pgTable is the demo's table in PostgreSQL; the prefix keeps it apart from
// the database's own tables.
const pgTable = "corral_demo_orders"

// pgAggregate is the per-customer aggregate in PostgreSQL's dialect.
const pgAggregate = `SELECT count(*), coalesce(sum(amount_cents), 0)::bigint, coalesce(avg(amount_cents), 0)::float8
	FROM ` + pgTable + ` WHERE customer_id = $1`

// pgSeedLock is the advisory lock id that serialises seeding, so demos
// started together do not seed twice.
const pgSeedLock = 0x636f7272616c // "corral"

// openPostgres connects to dsn and makes sure corral_demo_orders holds the
// generated orders: it creates the table when missing and (re)seeds it when
// its rows are not the generated ones. Seeding happens once; later runs find
// the data in place. Close leaves the table for the next run.
func openPostgres(ctx context.Context, dsn string) (_ *Origin, err error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("demo: postgres: %w", err)
	}
	o := &Origin{Label: "postgres", db: pgDB{db}}
	defer func() {
		if err != nil {
			_ = o.Close()
		}
	}()
	db.SetMaxOpenConns(originConns)
	db.SetMaxIdleConns(originConns)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		return nil, fmt.Errorf("demo: postgres: cannot connect: %w", err)
	}
	if err := seedPostgres(ctx, db); err != nil {
		return nil, err
	}
	return o, nil
}

func seedPostgres(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("demo: postgres: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	steps := []string{
		`SELECT pg_advisory_xact_lock(` + strconv.Itoa(pgSeedLock) + `)`,
		`CREATE TABLE IF NOT EXISTS ` + pgTable + ` (
			id           bigint PRIMARY KEY,
			customer_id  bigint NOT NULL,
			amount_cents bigint NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS ` + pgTable + `_customer ON ` + pgTable + ` (customer_id)`,
	}
	for _, q := range steps {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("demo: postgres: prepare %s: %w", pgTable, err)
		}
	}
	var rows, sum int64
	err = tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(amount_cents), 0)::bigint FROM `+pgTable).Scan(&rows, &sum)
	if err != nil {
		return fmt.Errorf("demo: postgres: inspect %s: %w", pgTable, err)
	}
	if wantRows, wantSum := dataFingerprint(); rows == wantRows && sum == wantSum {
		return nil // seeded by an earlier run
	}
	if _, err := tx.ExecContext(ctx, `TRUNCATE `+pgTable); err != nil {
		return fmt.Errorf("demo: postgres: %w", err)
	}
	if err := insertOrders(ctx, tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `ANALYZE `+pgTable); err != nil {
		return fmt.Errorf("demo: postgres: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("demo: postgres: seed %s: %w", pgTable, err)
	}
	return nil
}

// insertOrders inserts the generated orders into corral_demo_orders with
// multi-row INSERTs.
func insertOrders(ctx context.Context, tx *sql.Tx) error {
	var (
		sb   strings.Builder
		args = make([]any, 0, 3*insertBatch)
	)
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		sb.Reset()
		sb.WriteString("INSERT INTO " + pgTable + " (id, customer_id, amount_cents) VALUES ")
		for i := 0; i < len(args); i += 3 {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "($%d,$%d,$%d)", i+1, i+2, i+3)
		}
		if _, err := tx.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("demo: postgres: seed %s: %w", pgTable, err)
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

// pgDB is a PostgreSQL origin's database: a pool of originConns
// connections, so queries beyond it queue in database/sql.
type pgDB struct{ db *sql.DB }

func (p pgDB) totals(ctx context.Context, customer int64) (t customerTotals, err error) {
	err = p.db.QueryRowContext(ctx, pgAggregate, customer).Scan(&t.Orders, &t.TotalCents, &t.AvgCents)
	return t, err
}

func (p pgDB) Close() error { return p.db.Close() }
