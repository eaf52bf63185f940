package demo

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// originConns bounds the origin's connection pool, as an application's
// database pool would; queries beyond it queue in database/sql.
const originConns = 16

// openSQLite creates the embedded origin: a SQLite database in a temporary
// file (WAL mode, so readers run in parallel), seeded with the generated
// orders. Close removes the file.
func openSQLite(ctx context.Context) (_ *Origin, err error) {
	dir, err := os.MkdirTemp("", "corral-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: sqlite: %w", err)
	}
	cleanup := func() error { return os.RemoveAll(dir) }
	dsn := (&url.URL{
		Scheme: "file",
		Path:   filepath.Join(dir, "orders.db"),
		RawQuery: url.Values{"_pragma": {
			"journal_mode(WAL)", "synchronous(OFF)", "busy_timeout(5000)",
		}}.Encode(),
	}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		_ = cleanup()
		return nil, fmt.Errorf("demo: sqlite: %w", err)
	}
	o := &Origin{
		Label:   "sqlite (embedded)",
		db:      db,
		cleanup: cleanup,
		aggregate: `SELECT count(*), coalesce(sum(amount_cents), 0), coalesce(avg(amount_cents), 0)
			FROM orders WHERE customer_id = ?`,
	}
	defer func() {
		if err != nil {
			_ = o.Close()
		}
	}()
	db.SetMaxOpenConns(originConns)
	db.SetMaxIdleConns(originConns)
	if err := seedSQLite(ctx, db); err != nil {
		return nil, err
	}
	return o, nil
}

func seedSQLite(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("demo: sqlite: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `CREATE TABLE orders (
		id           INTEGER PRIMARY KEY,
		customer_id  INTEGER NOT NULL,
		amount_cents INTEGER NOT NULL)`)
	if err != nil {
		return fmt.Errorf("demo: sqlite: create table: %w", err)
	}
	if err := insertOrders(ctx, tx, "orders", func(int) string { return "?" }); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `CREATE INDEX orders_customer ON orders (customer_id)`); err != nil {
		return fmt.Errorf("demo: sqlite: create index: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("demo: sqlite: %w", err)
	}
	return nil
}
