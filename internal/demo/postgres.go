package demo

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// pgTable is the demo's table in PostgreSQL; the prefix keeps it apart from
// the database's own tables.
const pgTable = "corral_demo_orders"

// pgSeedLock is the advisory lock id that serialises seeding, so demos
// started together do not seed twice.
const pgSeedLock = 0x636f7272616c // "corral"

// openPostgres connects to dsn and makes sure corral_demo_orders holds the
// generated orders: it creates the table when missing and (re)seeds it when
// its rows are not the generated ones. Seeding happens once; later runs find
// the data in place. Close leaves the table for the next run.
func openPostgres(ctx context.Context, dsn string) (_ *Origin, err error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("demo: postgres: %w", err)
	}
	o := &Origin{
		Label: "postgres",
		db:    db,
		aggregate: `SELECT count(*), coalesce(sum(amount_cents), 0)::bigint, coalesce(avg(amount_cents), 0)::float8
			FROM ` + pgTable + ` WHERE customer_id = $1`,
	}
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
	if err := insertOrders(ctx, tx, pgTable, func(n int) string { return "$" + strconv.Itoa(n) }); err != nil {
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
