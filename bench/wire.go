package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
)

// wireCount counts the commands a trial's clients send to Redis, read from
// the bytes they write on their connections: every client of every system
// dials through it (go-redis's Options.Dialer, rueidis's DialCtxFn), so a
// pipeline counts each command in it, a script call (EVALSHA) counts one
// whatever the script runs inside, and commands that bypass a library's
// hooks ((S)SUBSCRIBE on a pub/sub connection, a raw PING) count too.
// Answers from an in-process cache send nothing and count nothing.
type wireCount struct {
	mu    sync.Mutex // guards conns
	conns []*countedConn
	start map[string]int64 // the snapshot markStart took

	serverStart commandStats // the server's INFO commandstats at markStart
}

// markStart takes the snapshot a trial's commands are counted from: after
// the harness connected the clients, before the systems are made.
func (w *wireCount) markStart() { w.start = w.snapshot() }

// dial opens a TCP connection to addr whose writes are counted.
func (w *wireCount) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return w.wrap(conn), nil
}

// dialRueidis is dial in the shape of rueidis.ClientOption.DialCtxFn.
func (w *wireCount) dialRueidis(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if cfg != nil {
		conn, err := (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return w.wrap(conn), nil
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return w.wrap(conn), nil
}

func (w *wireCount) wrap(conn net.Conn) net.Conn {
	c := &countedConn{Conn: conn, byName: map[string]int64{}}
	w.mu.Lock()
	w.conns = append(w.conns, c)
	w.mu.Unlock()
	return c
}

// snapshot returns the commands counted so far, by lower-case name, over
// every connection, open or closed.
func (w *wireCount) snapshot() map[string]int64 {
	w.mu.Lock()
	conns := w.conns
	w.mu.Unlock()
	out := map[string]int64{}
	for _, c := range conns {
		c.mu.Lock()
		for name, n := range c.byName {
			out[name] += n
		}
		c.mu.Unlock()
	}
	return out
}

// countedConn counts the commands written on it.
type countedConn struct {
	net.Conn
	mu     sync.Mutex // guards the fields below (a connection's writes are one caller's at a time; snapshot reads)
	scan   requestScanner
	byName map[string]int64
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.scan.feed(b[:n], c.byName)
	c.mu.Unlock()
	return n, err
}

// requestScanner follows a client's side of a RESP connection as it is
// written, in pieces of any size: each command is an array of bulk strings
// ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), or an inline command ("PING\r\n").
// It keeps the command's name (its first argument) and skips the other
// arguments' bytes without copying them.
type requestScanner struct {
	line []byte // the header line being read
	left int    // arguments of the current command still to come
	arg  int    // index of the argument being read
	skip int    // bytes of that argument (with its CRLF) still to come
	body bool   // reading an argument's bytes
	name []byte // the current command's name
}

// maxName bounds the bytes of a command name kept.
const maxName = 32

// feed scans b and adds each command completed in it to byName.
func (s *requestScanner) feed(b []byte, byName map[string]int64) {
	for len(b) > 0 {
		if s.body {
			n := min(s.skip, len(b))
			if s.arg == 0 && len(s.name) < maxName+2 {
				s.name = append(s.name, b[:min(n, maxName+2-len(s.name))]...)
			}
			s.skip -= n
			b = b[n:]
			if s.skip == 0 {
				s.body = false
				s.arg++
				if s.left--; s.left == 0 {
					s.done(byName)
				}
			}
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.line = append(s.line, b...)
			return
		}
		s.line = append(s.line, b[:i+1]...)
		b = b[i+1:]
		s.header(bytes.TrimRight(s.line, "\r\n"), byName)
		s.line = s.line[:0]
	}
}

// header handles a complete header line: an array's, an argument's, or an
// inline command.
func (s *requestScanner) header(line []byte, byName map[string]int64) {
	switch {
	case len(line) == 0:
	case s.left == 0 && line[0] == '*':
		if n, err := strconv.Atoi(string(line[1:])); err == nil && n > 0 {
			s.left, s.arg, s.name = n, 0, s.name[:0]
		}
	case s.left > 0 && line[0] == '$':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < 0 {
			s.left = 0 // not a request this scanner understands: resynchronise on the next line
			return
		}
		s.skip, s.body = n+2, true
	case s.left == 0:
		name, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		s.name = append(s.name[:0], name...)
		s.done(byName)
	}
}

// done counts the command just completed.
func (s *requestScanner) done(byName map[string]int64) {
	name := bytes.TrimRight(s.name, "\r\n")
	byName[string(bytes.ToLower(name[:min(len(name), maxName)]))]++
	s.name, s.left = s.name[:0], 0
}
