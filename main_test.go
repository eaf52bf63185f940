package corral_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// redisAddr is the address of a redis-server that TestMain starts for the
// Examples, which have no *testing.T to start their own.
var redisAddr string

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role)) // a re-executed test binary playing an app instance
	}
	os.Exit(redistest.RunMain(m, "corral", &redisAddr))
}

// quiet is a logger for code without a *testing.T (benchmarks, child
// processes).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testLogger returns a logger that keeps what corral logs during t and
// prints it only if t fails: the warnings then say what corral saw.
func testLogger(t testing.TB) *slog.Logger {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() { // registered first, so it runs after the Caches closed
		mu.Lock()
		defer mu.Unlock()
		if t.Failed() && buf.Len() > 0 {
			t.Logf("corral logged:\n%s", buf.Bytes())
		}
	})
	return slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

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
		opts.Logger = testLogger(t)
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

// hold starts a Fetch of key on c whose load returns (val, err) only when
// finish is called, and returns once that load has started: c's process
// holds key's lease. finish may be called once; the test's end calls it if
// the test did not.
func hold(t *testing.T, c *corral.Cache, key string, val []byte, err error) (finish func()) {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	returned := make(chan string, 1)
	go func() {
		v, err := c.Fetch(context.Background(), key, time.Minute, func(context.Context) ([]byte, error) {
			close(started)
			<-release
			return val, err
		})
		returned <- fmt.Sprintf("%q, %v", v, err)
	}()
	select {
	case <-started:
	case r := <-returned:
		t.Fatalf("hold %s: Fetch returned %s without loading; stats %+v", key, r, c.Stats())
	}
	var once sync.Once
	finish = func() { once.Do(func() { close(release) }) }
	t.Cleanup(finish)
	return finish
}
