package corral_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet is a logger for tests that expect warnings.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one test's Redis server, client and Cache.
type env struct {
	srv *redistest.Server
	rdb *redis.Client
	c   *corral.Cache
}

// newEnv starts a private redis-server and a Cache on it. opts may be nil.
func newEnv(t *testing.T, opts *corral.Options) *env {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	return &env{srv: srv, rdb: rdb, c: newCache(t, rdb, opts)}
}

// newCache returns a Cache on rdb, closed when the test ends.
func newCache(t *testing.T, rdb redis.UniversalClient, opts *corral.Options) *corral.Cache {
	t.Helper()
	if opts == nil {
		opts = &corral.Options{}
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	c, err := corral.New(rdb, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func value(s string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return []byte(s), nil }
}

// slow returns a loader that takes d (the origin's latency), counts its runs
// in n, and returns s. It honours its context.
func slow(d time.Duration, n *atomic.Int32, s string) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		if n != nil {
			n.Add(1)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return []byte(s), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
