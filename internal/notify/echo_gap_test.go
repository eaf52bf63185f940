package notify

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// holdProxy forwards a TCP connection to target; while held, what the
// client sends is kept back, chunk by chunk, until released: the server
// runs the pub/sub connection's commands late, as a busy server or a slow
// network would.
type holdProxy struct {
	mu      sync.Mutex
	held    bool
	pending [][]byte
	srv     net.Conn
}

func startHoldProxy(t *testing.T, target string) (*holdProxy, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{}
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, s)
			cmu.Unlock()
			p.mu.Lock()
			p.srv = s
			p.mu.Unlock()
			go func() { _, _ = copyAll(c, s) }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						data := append([]byte(nil), buf[:n]...)
						p.mu.Lock()
						if p.held {
							p.pending = append(p.pending, data)
						} else {
							_, _ = s.Write(data)
						}
						p.mu.Unlock()
					}
					if err != nil {
						s.Close()
						return
					}
				}
			}()
		}
	}()
	return p, ln.Addr().String()
}

func copyAll(dst, src net.Conn) (int64, error) {
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if err != nil {
			dst.Close()
			return n, err
		}
	}
}

func (p *holdProxy) hold() { p.mu.Lock(); p.held = true; p.mu.Unlock() }

// pendingHas reports whether a held chunk contains s.
func (p *holdProxy) pendingHas(s string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.pending {
		if bytes.Contains(bytes.ToLower(d), []byte(s)) {
			return true
		}
	}
	return false
}

// releaseThrough forwards the held chunks up to and including the first
// that contains s; the rest stay held.
func (p *holdProxy) releaseThrough(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.pending) > 0 {
		d := p.pending[0]
		p.pending = p.pending[1:]
		_, _ = p.srv.Write(d)
		if bytes.Contains(bytes.ToLower(d), []byte(s)) {
			return
		}
	}
}

// releaseAll forwards everything held and stops holding.
func (p *holdProxy) releaseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.pending {
		_, _ = p.srv.Write(d)
	}
	p.pending, p.held = nil, false
}

// The echo says the notice channel was subscribed when fetch.lua ran; it
// does not say it stays subscribed. A channel that lingered its time is
// unsubscribed (sweep: UNSUBSCRIBE of the channel and its echo, written but
// not yet run by the server); a waiter listens on it again (a new
// SUBSCRIBE, behind it on the same connection) and asks fetch.lua, which
// the server runs first: the old subscription hears the echo (heard 1, so
// InTime), then the UNSUBSCRIBE runs, the holder commits and publishes to
// nobody, then the SUBSCRIBE runs. The waiter, told it was in time, trusts
// its notice that never comes: it waits out the lease (recheck.After), not
// a poll, and no recheck tells it otherwise (the new subscription's first
// confirmation closes its fresh confirmed channel silently).
func TestEchoHeardThenUnsubscribedMissesNotice(t *testing.T) {
	srv := redistest.Start(t)
	direct := srv.Client()
	p, addr := startHoldProxy(t, srv.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { viaProxy.Close() })
	ctx := context.Background()
	var st counted
	n := New(Config{Client: viaProxy, Stats: &st, Timeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Mode: func(context.Context) (byte, error) { return wire.AnnouncePlain, nil },
		Echo: wire.Echoes("q")})
	t.Cleanup(func() { n.Close() })
	const ch = "q:n:{k}:k"
	numsub := func() int64 { return direct.PubSubNumSub(ctx, ch).Val()[ch] }

	s1 := n.Listen(ctx, ch, true)
	testkit.Eventually(t, 5*time.Second, "the first waiter's subscription confirmed", func() bool {
		ok, _ := s1.Hears(0, false, s1.Mark())
		return ok
	})
	s1.Close() // the channel lingers

	p.hold()
	testkit.Eventually(t, 5*time.Second, "the lingering channel's UNSUBSCRIBE written", func() bool {
		return p.pendingHas("unsubscribe")
	})
	s2 := n.Listen(ctx, ch, true) // a new stampede on the key
	defer s2.Close()
	testkit.Eventually(t, 5*time.Second, "its SUBSCRIBE written behind", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) >= 2
	})

	// fetch.lua says WAIT, publishing the echo: the server has run neither
	// command of the pub/sub connection yet.
	heard := direct.Publish(ctx, s2.Echo(), "").Val()
	inTime := s2.InTime(ctx, heard > 0)
	t.Logf("echo heard by %d: in time %v", heard, inTime)

	p.releaseThrough("unsubscribe")
	testkit.Eventually(t, 5*time.Second, "the UNSUBSCRIBE run", func() bool { return numsub() == 0 })
	// The holder commits: its notice goes out now.
	direct.Publish(ctx, ch, "d")
	p.releaseAll()
	testkit.Eventually(t, 5*time.Second, "the SUBSCRIBE run", func() bool { return numsub() == 1 })

	if !inTime {
		return // the waiter fetches again: it sees the commit
	}
	if ok, _ := s2.Hears(0, inTime, s2.Mark()); !ok {
		return // it polls
	}
	select {
	case <-s2.Notices():
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter told it listened in time (echo heard) heard neither the holder's notice nor a recheck: it waits out the lease")
	}
}
