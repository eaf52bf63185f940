package redistest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy between clients and a Redis server, for fault
// injection: it can cut a connection when the server's reply matches a
// pattern (a reply lost to a dropped connection), delay replies, reset every
// connection, turn into a black hole that accepts connections and never
// answers, or refuse connections as a server that is gone does (a
// partition that resets them).
type Proxy struct {
	Addr string // where clients connect

	target string
	lnMu   sync.Mutex              // guards ln
	ln     net.Listener            // nil while refusing
	cut    atomic.Pointer[[]byte]  // cut the first connection whose reply contains this
	held   atomic.Pointer[holdCut] // HoldThenCut's, until it cut
	hold   atomic.Pointer[holdOne] // HoldReply's, until it matched
	last   atomic.Pointer[holdOne] // HoldReply's latest, released by Close
	hole   atomic.Bool             // drop all data both ways
	delay  atomic.Int64            // added to every chunk of replies, ns
	wg     sync.WaitGroup

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
}

// StartProxy starts a proxy to target (host:port), stopped when t ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept(ln)
	t.Cleanup(p.Close)
	return p
}

// Refuse makes the proxy refuse connections (on): it stops listening, so a
// dial gets "connection refused", and closes every connection through it,
// as a killed server or a partition that resets connections would. Off
// listens again on the same address. It reports an error if the address
// could not be taken again.
func (p *Proxy) Refuse(on bool) error {
	p.lnMu.Lock()
	defer p.lnMu.Unlock()
	switch {
	case on && p.ln != nil:
		p.stopListening()
		p.Reset()
	case !on && p.ln == nil:
		ln, err := net.Listen("tcp", p.Addr)
		if err != nil {
			return err
		}
		p.ln = ln
		p.wg.Add(1)
		go p.accept(ln)
	}
	return nil
}

// CutOnReply makes the proxy drop, once, the connection on which the server
// sends a reply containing pattern: the reply never reaches the client.
func (p *Proxy) CutOnReply(pattern []byte) { p.cut.Store(&pattern) }

// holdCut is HoldThenCut's: the connection it holds, once one is.
type holdCut struct {
	from, until []byte
	mu          sync.Mutex
	conn        net.Conn      // the client side of the connection held; nil before from
	cut         chan struct{} // closed once it cut
}

// HoldThenCut makes the proxy keep back, from the first reply containing
// from on, every reply of that one connection, until its held replies
// contain until; it then stops listening (new connections are refused;
// others stay) and drops that connection with what it held, none of it
// ever read by the client. The returned channel is closed then. Listen
// again with Refuse(false). A connection that the server answered and that
// dropped before the client read the answer, while the client's dials
// fail: a subscription's confirmation and the messages behind it, lost.
func (p *Proxy) HoldThenCut(from, until []byte) <-chan struct{} {
	h := &holdCut{from: from, until: until, cut: make(chan struct{})}
	p.held.Store(h)
	return h.cut
}

// holding reports whether the reply data of the connection whose client
// side is c is to be held back, from this chunk on: it is HoldThenCut's.
// cut reports that the held replies now contain its until.
func (p *Proxy) holding(c net.Conn, data, held []byte) (hold, cut bool) {
	h := p.held.Load()
	if h == nil {
		return false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.conn == nil && bytes.Contains(data, h.from):
		h.conn = c
	case h.conn != c:
		return false, false
	}
	if !bytes.Contains(append(held, data...), h.until) {
		return true, false
	}
	p.held.CompareAndSwap(h, nil)
	p.lnMu.Lock()
	p.stopListening()
	p.lnMu.Unlock()
	close(h.cut)
	return true, true
}

// holdOne is HoldReply's.
type holdOne struct {
	pattern []byte
	held    chan struct{} // closed once a reply matched
	release chan struct{} // closed to let it through
	once    sync.Once     // closes release
}

func (h *holdOne) let() { h.once.Do(func() { close(h.release) }) }

// HoldReply makes the proxy keep back, once, the first reply chunk that
// contains pattern (and what follows it on that connection) until release
// is called or the proxy closes: a reply on its way while the server has
// already run the command. held is closed once a reply matched.
func (p *Proxy) HoldReply(pattern []byte) (held <-chan struct{}, release func()) {
	h := &holdOne{pattern: pattern, held: make(chan struct{}), release: make(chan struct{})}
	p.hold.Store(h)
	p.last.Store(h)
	return h.held, h.let
}

// holdReply holds data back, if it is HoldReply's, until it is released.
func (p *Proxy) holdReply(data []byte) {
	h := p.hold.Load()
	if h == nil || !bytes.Contains(data, h.pattern) || !p.hold.CompareAndSwap(h, nil) {
		return
	}
	close(h.held)
	<-h.release
}

// Latency delays every reply by d (0 for none), as a slow network or a
// busy server would.
func (p *Proxy) Latency(d time.Duration) { p.delay.Store(int64(d)) }

// Blackhole makes the proxy swallow everything sent either way (on) or
// forward again (off). Connections stay open: clients see no reply.
// Connections that lost data are out of step with Redis afterwards; reset
// them with Reset.
func (p *Proxy) Blackhole(on bool) { p.hole.Store(on) }

// Reset closes every connection through the proxy, as a network failure
// would; new connections are accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// stopListening closes the listener, if any: dials are refused. Called
// with p.lnMu held.
func (p *Proxy) stopListening() {
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.lnMu.Lock()
		refusing := p.ln != ln // Refuse came while this one was accepted: it must not outlive it
		p.lnMu.Unlock()
		if refusing {
			c.Close()
			s.Close()
			continue
		}
		p.track(c, s)
		p.wg.Add(2)
		go func() { defer p.wg.Done(); p.pipe(s, c, false) }()
		go func() { defer p.wg.Done(); p.pipe(c, s, true) }()
	}
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

// pipe copies from src to dst, dropping everything while the proxy is a
// black hole; replies (server to client) are checked for the cut pattern.
// Either side closing closes both.
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	defer p.untrack(dst, src)
	buf := make([]byte, 64<<10)
	var held []byte // HoldThenCut's
	for {
		n, err := src.Read(buf)
		data := buf[:n]
		var hold, cut bool
		if replies && n > 0 {
			hold, cut = p.holding(dst, data, held)
		}
		switch {
		case n == 0 || p.hole.Load():
		case cut:
			return // what it held is lost with the connection
		case hold:
			held = append(held, data...)
		case replies && p.cutNow(data):
			return // the reply is lost with the connection
		default:
			if d := p.delay.Load(); replies && d > 0 {
				time.Sleep(time.Duration(d)) // the injected latency itself
			}
			if replies {
				p.holdReply(data)
			}
			if _, werr := dst.Write(data); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection
			return
		}
	}
}

// cutNow reports, once, whether data holds the cut pattern.
func (p *Proxy) cutNow(data []byte) bool {
	pat := p.cut.Load()
	return pat != nil && bytes.Contains(data, *pat) && p.cut.CompareAndSwap(pat, nil)
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	p.lnMu.Lock()
	p.stopListening()
	p.lnMu.Unlock()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	if h := p.last.Load(); h != nil {
		h.let() // before waiting for the pipes: one may hold a reply
	}
	p.wg.Wait()
}
