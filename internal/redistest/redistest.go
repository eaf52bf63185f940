// Package redistest starts private redis-server processes for tests, on free
// loopback ports, and stops them in t.Cleanup. A missing redis-server fails
// the test with a message saying how to install it; it never skips.
package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	Addr string // host:port on 127.0.0.1

	t    testing.TB // nil for servers from Run
	bin  string
	dir  string
	args []string
	conf string // a Sentinel's config file; "" for a server

	mu   sync.Mutex // guards cmd, exit
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

// Binary returns the path of redis-server, or an error saying how to
// install it.
func Binary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("redis-server not found: corral's tests run against a real Redis. " +
		"Install it (Debian: apt-get install -y redis-server; `make test` does this for you)")
}

// Start starts a redis-server with the given extra arguments (such as
// "--rename-command", "SPUBLISH", "") and stops it when t ends. It fails t
// when redis-server is missing or does not start.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := Run(t.TempDir(), args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	s.t = t
	t.Cleanup(s.Close)
	return s
}

// Run starts a redis-server keeping its files in dir, for use outside a
// test (TestMain, examples). Stop it with Close.
func Run(dir string, args ...string) (*Server, error) {
	var err error
	for range 5 { // a free port can be taken between choosing and binding it
		var addr string
		if addr, err = freeAddr(); err != nil {
			continue
		}
		var s *Server
		if s, err = runOn(dir, addr, args...); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("cannot start redis-server: %w", err)
}

// runOn starts a redis-server on addr.
func runOn(dir, addr string, args ...string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, bin: bin, dir: dir, args: args}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// running reports whether the process is up.
func (s *Server) running() bool {
	s.mu.Lock()
	exit := s.exit
	s.mu.Unlock()
	if exit == nil {
		return false
	}
	select {
	case <-exit:
		return false
	default:
		return true
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis-"+port+".log")}
	if s.conf != "" {
		args = append([]string{s.conf, "--sentinel"}, args...) // a sentinel's config file comes first
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	s.mu.Lock()
	s.cmd, s.exit = cmd, exit
	s.mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := s.ping(); err == nil {
			return nil
		}
		select {
		case <-exit:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis-"+port+".log"))
			return fmt.Errorf("redis-server exited: %s%s", stderr.String(), tail(log))
		case <-time.After(10 * time.Millisecond): // polling for readiness, bounded by deadline
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer PING within 10s", s.Addr)
		}
	}
}

func (s *Server) ping() error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Client returns a new client of s, closed when the test ends (for servers
// from Start). opts, if
// given, adjusts the client's options.
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

// URL returns s's address as a redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Port returns s's TCP port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Kill stops redis-server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.kill() }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exit
}

// Restart kills redis-server and starts it again on the same port, empty.
func (s *Server) Restart() error {
	s.kill()
	if err := s.start(); err != nil {
		return fmt.Errorf("redistest: restart redis-server on %s: %w", s.Addr, err)
	}
	return nil
}

// Close stops redis-server.
func (s *Server) Close() { s.kill() }
