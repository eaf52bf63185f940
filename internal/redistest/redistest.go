// Package redistest starts private redis-server processes for tests, on free
// loopback ports, and stops them in t.Cleanup: single servers, Clusters and
// Sentinels. A missing redis-server fails the test with a message saying how
// to install it; it never skips. The processes are run by
// internal/redisproc.
package redistest

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	*redisproc.Server
	t testing.TB // nil for servers from Run
}

// startTimeout bounds starting or restarting a server.
const startTimeout = 20 * time.Second

// Start starts a redis-server with the given extra arguments (such as
// "--rename-command", "SPUBLISH", "") and stops it when t ends. It fails t
// when redis-server is missing or does not start.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return startWith(t, redisproc.Options{Dir: t.TempDir(), Args: args})
}

func startWith(t testing.TB, o redisproc.Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	p, err := redisproc.StartWith(ctx, o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s := &Server{Server: p, t: t}
	t.Cleanup(s.Close)
	return s
}

// Run starts a redis-server keeping its files in dir, for use outside a
// test (TestMain, examples). Stop it with Close.
func Run(dir string, args ...string) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	p, err := redisproc.StartWith(ctx, redisproc.Options{Dir: dir, Args: args})
	if err != nil {
		return nil, err
	}
	return &Server{Server: p}, nil
}

// Client returns a new client of s, closed when the test ends (for servers
// from Start). opts, if given, adjusts the client's options.
func (s *Server) Client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: s.Addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	if s.t != nil {
		s.t.Cleanup(func() { _ = c.Close() })
	}
	return c
}

// Port returns s's TCP port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Restart kills redis-server and starts it again on the same port, empty.
func (s *Server) Restart() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return s.Server.Restart(ctx)
}

// Close stops redis-server.
func (s *Server) Close() { s.Stop() }
