// Package redisproc runs a private redis-server process on a loopback port.
// `corral soak` uses it to start a Redis of its own, kill it and start it
// again, empty, on the same port, and stop it at the end; internal/redistest
// builds the tests' servers, Clusters and Sentinels on it.
//
// The server keeps nothing on disk (no RDB snapshots, no AOF), so a restart
// is a restart with an empty cache. Readiness is read from the server's own
// log ("Ready to accept connections") and confirmed with a PING; nothing
// polls on a fixed sleep.
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotInstalled is returned when redis-server is not on PATH.
var ErrNotInstalled = errors.New("redisproc: redis-server not found on PATH " +
	"(Debian: apt-get install -y redis-server; `make test` installs it)")

// startTimeout bounds how long a server may take to say it is ready.
const startTimeout = 15 * time.Second

// Server is one redis-server process on 127.0.0.1. It is safe for
// concurrent use.
type Server struct {
	Addr string // 127.0.0.1:port; the same across restarts

	bin  string
	opts Options

	mu   sync.Mutex // guards proc
	proc *process   // nil while stopped
}

// process is one run of redis-server.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	ready  chan struct{} // closed when the log says the server accepts connections
	mu     sync.Mutex    // guards log
	log    []string      // the last lines of its log, for error messages
}

// Binary returns the path of redis-server on PATH, or ErrNotInstalled.
func Binary() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNotInstalled
	}
	return p, nil
}

// Options say how to run a server.
type Options struct {
	Dir  string   // working directory; must exist
	Addr string   // 127.0.0.1:port to listen on; "" picks a free port
	Args []string // more redis-server arguments, e.g. "--cluster-enabled", "yes"

	// SentinelConfig, when set, runs a Sentinel with this config file (which
	// Sentinel rewrites) instead of a server.
	SentinelConfig string
}

// Start starts redis-server on a free loopback port, with its working
// directory in dir (which must exist). Stop it with Stop.
func Start(ctx context.Context, dir string) (*Server, error) {
	return StartWith(ctx, Options{Dir: dir})
}

// StartWith starts redis-server as o says. Stop it with Stop.
func StartWith(ctx context.Context, o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, opts: o, Addr: o.Addr}
	for range 5 { // a free port can be taken between choosing and binding it
		if o.Addr == "" {
			if s.Addr, err = freeAddr(); err != nil {
				continue
			}
		}
		if err = s.Restart(ctx); err == nil || o.Addr != "" {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("redisproc: cannot start redis-server: %w", err)
	}
	return s, nil
}

// freeAddr returns a free loopback address whose port lies below the
// kernel's ephemeral range, so that no outgoing connection can take the port
// while the server is down between a Kill and a Restart.
func freeAddr() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const first = 15000
	if low <= first+1000 {
		low = 65535 // an unusual range: fall back to any port the kernel picks
	}
	var err error
	for range 50 {
		port := 0
		if low < 65535 {
			port = first + rand.IntN(low-first)
		}
		var l net.Listener
		l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr, nil
	}
	return "", err
}

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Kill kills the server with SIGKILL, as a crash would, and waits until the
// process has exited. Every connection to it breaks at once; its data is
// gone. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop stops the server for good (it is killed: there is nothing to save).
func (s *Server) Stop() { s.Kill() }

// Restart starts the server on its address, empty, and returns once it
// answers PING. It kills a running server first.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	_, port, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return err
	}
	args := []string{"--port", port, "--bind", "127.0.0.1", "--dir", s.opts.Dir, "--logfile", "", "--daemonize", "no"}
	if s.opts.SentinelConfig != "" {
		args = append([]string{s.opts.SentinelConfig, "--sentinel"}, args...) // the config file comes first
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	cmd := exec.Command(s.bin, append(args, s.opts.Args...)...)
	setProcessGroup(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), ready: make(chan struct{})}
	logDone := make(chan struct{})
	go p.readLog(out, logDone)
	go func() {
		<-logDone // the log ends with the process; Wait closes the pipe
		_ = cmd.Wait()
		close(p.exited)
	}()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-p.ready:
	case <-p.exited:
		return fmt.Errorf("redisproc: redis-server on %s exited at start: %s", s.Addr, p.tail())
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("redisproc: redis-server on %s not ready within %v: %s", s.Addr, startTimeout, p.tail())
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-p.exited
		return ctx.Err()
	}
	if err := ping(ctx, s.Addr); err != nil {
		_ = cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("redisproc: redis-server on %s says it is ready but does not answer PING: %w", s.Addr, err)
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// readLog reads the server's log until it ends, keeping its last lines and
// closing ready when the server accepts connections.
func (p *process) readLog(out interface{ Read([]byte) (int, error) }, done chan<- struct{}) {
	defer close(done)
	sc := bufio.NewScanner(out)
	ready := false
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.log = append(p.log, line)
		if len(p.log) > 20 {
			p.log = p.log[len(p.log)-20:]
		}
		p.mu.Unlock()
		// A server says it is ready; a Sentinel says which one it is.
		if !ready && (strings.Contains(line, "Ready to accept connections") || strings.Contains(line, "Sentinel ID is")) {
			ready = true
			close(p.ready)
		}
	}
}

func (p *process) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

func ping(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}
