package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A node's probe. The monitor asks a node it has not heard from whether it
// is there (liveness.go), on a connection of its own to that node, dialled
// with the client's own dialer when the node gets its first batch, and kept.
// A probe writes a PING (any Redis answers it, one that wants AUTH with an
// error) and the monitor's later ticks look into the socket
// without waiting: any bytes there are an answer. So the verdict does not
// depend on when a goroutine of this process gets the CPU. A client starved
// of CPU (a busy machine, a burst of goroutines) reads its replies late; the
// kernel has them all the same, and a node that answered is not taken for a
// silent one. A connection that fails or ends is dialled again at the next
// probe; a dial the node refuses is the unreachable verdict, and so is a
// connection it closes before it answered any PING (a PING is written as
// soon as the connection is made).
//
// Clients whose node is not a *redis.Client, or whose connections are not
// plain sockets (TLS), are probed with a PING through the client instead.

// Ping is the probe: PING as a RESP array, which every server speaking
// Redis's protocol reads (an embedded one such as miniredis closes the
// connection on an inline command, which would look like a refusal).
// Check writes it too, on a connection of its own.
var Ping = []byte("*1\r\n$4\r\nPING\r\n")

// prober is a node's probe connection.
type prober struct {
	mu       sync.Mutex
	conn     net.Conn // nil before it is dialled, and after it failed
	dialing  bool
	pinged   bool      // a PING is out, unanswered
	sentAt   time.Time // when it was written
	answered bool      // conn answered a PING: a node that closes it before is refusing
	closed   bool

	started atomic.Bool // a dial was started once
}

// dial opens the probe connection of node in the background, unless it is
// open or being opened. A refusal is recorded on l. mark says the dial is
// itself a probe, whose silence counts from now.
func (p *Pipeline) dialProbe(node nodeRef, l *liveness, c *redis.Client, mark bool) {
	if mark {
		// Counted from now even when a dial begun earlier is still under
		// way: a node that never completes a connection is silent too.
		l.unheard.CompareAndSwap(0, time.Now().UnixNano())
	}
	pr := &l.prober
	pr.mu.Lock()
	if pr.conn != nil || pr.dialing || pr.closed {
		pr.mu.Unlock()
		return
	}
	pr.dialing = true
	pr.started.Store(true)
	pr.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(p.ctx, maxStalls*p.timeout)
		defer cancel()
		o := c.Options()
		conn, err := o.Dialer(ctx, o.Network, o.Addr)
		if err == nil {
			if _, raw := conn.(syscall.Conn); !raw {
				conn.Close()
				conn, err = nil, errNotProbeable
			}
		}
		pr.mu.Lock()
		defer pr.mu.Unlock()
		pr.dialing = false
		switch {
		case err != nil:
			refused := !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && !errors.Is(err, errNotProbeable) && !Says(err, Timeout)
			if refused {
				l.refused.Store(&refusal{err: err, at: time.Now()})
				p.note(err)
			}
			if errors.Is(err, errNotProbeable) {
				l.plain.Store(true)
			}
			if refused {
				defer func() { go p.trip(node, l, unreachableError{err}) }() // after pr.mu is released
			}
		case pr.closed:
			conn.Close()
		default:
			// A PING at once: a server that accepts connections and closes
			// them unanswered (a proxy or load balancer in front of a dead
			// Redis, maxclients reached) is found out at the next look.
			pr.conn, pr.answered = conn, false
			conn.SetWriteDeadline(time.Now().Add(p.timeout))
			if _, err := conn.Write(Ping); err == nil {
				pr.pinged, pr.sentAt = true, time.Now()
			}
		}
	}()
}

// RefusalReply reports whether b, the first bytes a new connection read,
// is the error a server sends on a connection it refuses before closing it
// (maxclients reached), and returns its text. Other error replies (NOAUTH
// to a PING without AUTH, say) are a server that answers.
func RefusalReply(b []byte) (string, bool) {
	line, _, _ := strings.Cut(string(b), "\r\n")
	if strings.HasPrefix(line, "-") {
		return MaxClients(line[1:])
	}
	return "", false
}

// MaxClients reports whether msg, an error's text, is the one a server at
// maxclients refuses a connection with, and returns it.
func MaxClients(msg string) (string, bool) {
	return msg, strings.Contains(msg, "max number of clients reached")
}

// MaxClientsFix is what to do about a server at maxclients.
const MaxClientsFix = "every connection it allows is taken (maxclients): raise maxclients " +
	"(CONFIG SET maxclients, or redis.conf), or lower the clients' pool sizes (go-redis PoolSize, " +
	"10 per CPU by default) or the number of clients"

// errProbeStuck says a probe connection left its PING unanswered while
// the node answered other calls.
var errProbeStuck = errors.New("corral: probe connection stuck")

// errNotProbeable says the client's connections are not plain sockets.
var errNotProbeable = errors.New("corral: probe connection is not a socket")

// probe asks node whether it is there (see the top of this file), at most
// once per call: a PING is written, or the answer to the one out is looked
// for, or the connection is dialled again.
func (p *Pipeline) probe(node nodeRef, l *liveness) {
	c, ok := node.client.(*redis.Client)
	if !ok || l.plain.Load() {
		p.pingProbe(node, l)
		return
	}
	pr := &l.prober
	pr.mu.Lock()
	conn := pr.conn
	if conn == nil {
		pr.mu.Unlock()
		p.dialProbe(node, l, c, true)
		return
	}
	var err error
	if !pr.pinged {
		now := time.Now()
		conn.SetWriteDeadline(now.Add(p.timeout))
		if _, err = conn.Write(Ping); err == nil {
			pr.pinged, pr.sentAt = true, now
			l.unheard.CompareAndSwap(0, now.UnixNano())
		}
	} else {
		err = pr.look(l, true)
	}
	p.probeEnded(node, l, err) // unlocks pr.mu
}

// look reads what the probe connection received, without waiting: the
// answer to the PING out, if it came. silence says a PING unanswered counts
// as the node's silence (a probe's), not only as a PING still out. It
// returns the connection's error, if it failed or ended. pr.mu is held.
func (pr *prober) look(l *liveness, silence bool) error {
	var buf [512]byte
	n, err := readNow(pr.conn, buf[:])
	if n == 0 && err == nil && pr.pinged && silence {
		sent := pr.sentAt.UnixNano()
		if l.heard.Load() > sent && time.Since(pr.sentAt) >= ProbeAfter {
			// The node answered other calls since this PING went out,
			// but not the PING: the probe's own connection is stuck.
			// A new one is dialled at the next probe.
			return errProbeStuck
		}
		// Nothing heard since the PING went out (a batch answered before
		// it may have cleared unheard): the silence counts from the PING.
		l.unheard.CompareAndSwap(0, sent)
	}
	if n > 0 && pr.pinged && !pr.answered {
		if msg, ok := RefusalReply(buf[:n]); ok {
			// The server's reason for refusing the connection (it closes
			// it next): not an answer, and what the trip will say.
			return serverRefused(msg)
		}
	}
	if n > 0 && pr.pinged {
		// Answered: whatever else is in the socket is the same answer,
		// and then maybe its end (a server gone since).
		for n > 0 && err == nil {
			n, err = readNow(pr.conn, buf[:])
		}
		// The node was there when the PING went out: that much is sure
		// however late the answer is read (and it may be the answer to a
		// PING of long ago, whose batch was answered first).
		pr.pinged, pr.answered = false, true
		for sent := pr.sentAt.UnixNano(); ; {
			h := l.heard.Load()
			if h >= sent || l.heard.CompareAndSwap(h, sent) {
				break
			}
		}
		l.unheard.Store(0)
	}
	return err
}

// probeEnded closes the probe connection when err says it failed or ended
// (a new one is dialled at the next probe), and unlocks pr.mu. A connection
// the node closed before answering any PING is a refusal: the node trips.
func (p *Pipeline) probeEnded(node nodeRef, l *liveness, err error) {
	pr := &l.prober
	refused := err != nil && !pr.answered && !errors.Is(err, errProbeStuck) && !Says(err, Timeout)
	if err != nil {
		pr.conn.Close()
		pr.conn, pr.pinged = nil, false
	}
	pr.mu.Unlock()
	if refused {
		// Not here: the monitor may hold flyMu, which the trip takes.
		go p.trip(node, l, unreachableError{errorf("the connection was closed before it answered: %w", err)})
	}
}

// pingProbe probes node with a PING through its client, unless such a
// probe is under way, bounded by RedisTimeout.
func (p *Pipeline) pingProbe(node nodeRef, l *liveness) {
	if !l.probing.CompareAndSwap(false, true) {
		return
	}
	l.unheard.CompareAndSwap(0, time.Now().UnixNano())
	go func() {
		defer l.probing.Store(false)
		ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
		defer cancel()
		if err := node.client.Ping(ctx).Err(); err == nil {
			l.heard.Store(time.Now().UnixNano())
			l.unheard.Store(0)
		}
	}()
}

// close closes the probe connection, and any dialled later.
func (pr *prober) close() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.closed = true
	if pr.conn != nil {
		pr.conn.Close()
		pr.conn = nil
	}
}

// readSoon reads what conn has received, waiting at most a millisecond:
// readNow where the socket cannot be read directly.
func readSoon(conn net.Conn, buf []byte) (int, error) {
	conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	n, err := conn.Read(buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		err = nil
	}
	return n, err
}
