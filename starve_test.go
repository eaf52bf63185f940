package corral_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A client starved of CPU is a slow client, not a silent Redis: Redis
// answers at once, but the goroutines of the process that would read the
// answers wait their turn for longer than RedisTimeout. Here every command
// of each process's client learns its reply 250 ms late (RedisTimeout is
// 100 ms), as a goroutine that gets the CPU late would. Every key is still
// loaded once, across 8 processes, and nobody fails open: the probe that
// tells slow from silent reads its answer off the socket (internal/transport/probe.go).
func TestLoad_ClientReadsLate(t *testing.T) {
	const procs, keysN, perKey, lag = 8, 10, 2, 250 * time.Millisecond
	srv := redistest.Start(t)
	late := &lateReplies{}
	caches := make([]*corral.Cache, procs)
	for i := range caches {
		rdb := srv.Client(func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
		rdb.AddHook(late)
		caches[i] = newCache(t, rdb, &corral.Options{RedisTimeout: 100 * time.Millisecond})
	}
	stampede(t, caches, keysN, perKey, func() { late.lag.Store(int64(lag)) })
}

// The same with real starvation: goroutines that spin (each holds a CPU
// until the runtime preempts it) outnumber the CPUs 16 times over, so that
// the client's goroutines, its senders, the monitor and the probes alike,
// wait for the CPU for hundreds of milliseconds at a time.
func TestLoad_StarvedClient(t *testing.T) {
	const procs, keysN, perKey = 8, 10, 2
	srv := redistest.Start(t)
	caches := processes(t, srv, procs, func() *corral.Options {
		return &corral.Options{RedisTimeout: 200 * time.Millisecond}
	})
	var stop atomic.Bool
	var spin sync.WaitGroup
	t.Cleanup(func() { stop.Store(true); spin.Wait() })
	stampede(t, caches, keysN, perKey, func() {
		for range 16 * runtime.GOMAXPROCS(0) {
			spin.Add(1)
			go func() {
				defer spin.Done()
				for !stop.Load() {
				}
			}()
		}
	})
	stop.Store(true)
}

// stampede warms caches up (connections open, scripts loaded), calls
// starve, then has perKey goroutines of each Cache fetch each of keysN cold
// keys at once. It fails t unless every key was loaded exactly once (but
// for a lease lost: loadedOnce), every caller got its value, and no Cache
// failed open.
func stampede(t *testing.T, caches []*corral.Cache, keysN, perKey int, starve func()) {
	t.Helper()
	ctx := context.Background()
	for _, c := range caches {
		if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
			t.Fatal(err)
		}
	}
	starve()
	keys := make([]string, keysN)
	for i := range keys {
		keys[i] = "starved:" + strconv.Itoa(i)
	}
	var loads loadCounter
	var wrong atomic.Int32
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, c := range caches {
		for _, k := range keys {
			for range perKey {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
					defer cancel()
					v, err := c.Fetch(cctx, k, time.Minute, func(context.Context) ([]byte, error) {
						loads.add(k)
						return []byte("v:" + k), nil
					})
					if err != nil || string(v) != "v:"+k {
						if wrong.Add(1) <= 3 {
							t.Errorf("Fetch(%s) = %q, %v", k, v, err)
						}
					}
				}()
			}
		}
	}
	wg.Wait()
	loadedOnce(t, caches, &loads, keys)
	noFailOpen(t, caches)
	t.Logf("took %v", time.Since(t0))
}

// lateReplies hands each command its reply lag late, as a client whose
// goroutines wait for the CPU would read it.
type lateReplies struct{ lag atomic.Int64 }

func (l *lateReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *lateReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		l.wait()
		return err
	}
}

func (l *lateReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		l.wait()
		return err
	}
}

// wait is the time the reply sits unread.
func (l *lateReplies) wait() {
	if d := time.Duration(l.lag.Load()); d > 0 {
		<-time.After(d)
	}
}

// A large reply that the client reads too slowly for its own ReadTimeout
// (a client starved of CPU reads a 64 MiB value slowly) is no verdict on
// Redis either: the read is sent again, and the waiter gets the value of
// the one load without a Redis error (before: the error reached the
// waiter, which then had to decide again, and at worst failed open). Only
// commands that just read are sent again this way, never a script. The
// client's own retries are off: go-redis sends a whole pipeline again
// after a read timeout, scripts included, unless MaxRetries is -1.
func TestLoad_LargeReplyReadTooSlowly(t *testing.T) {
	srv := redistest.Start(t)
	want := bigValue(4 << 20) // past what a fetch reply or a notice carries
	holder := newCache(t, srv.Client(), nil)
	slow := &slowReads{}
	waiterClient := srv.Client(func(o *redis.Options) {
		o.ReadTimeout = 300 * time.Millisecond
		o.MaxRetries = -1 // go-redis would send the pipeline again itself, scripts and all
		o.Dialer = slow.dial
	})
	waiter := newCache(t, waiterClient, nil)
	ctx := context.Background()

	var loads atomic.Int32
	release, loading := make(chan struct{}), make(chan struct{})
	load := func(context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			close(loading)
			<-release
		}
		return want, nil
	}
	got := make(chan error, 2)
	go func() {
		_, err := holder.Fetch(ctx, "big", time.Minute, load)
		got <- err
	}()
	<-loading
	go func() {
		v, err := waiter.Fetch(ctx, "big", time.Minute, load)
		if err == nil && !bytes.Equal(v, want) {
			err = fmt.Errorf("got %d bytes, not the value", len(v))
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "the second process waiting for the first one's lease", func() bool { return waiter.Stats().Waits > 0 })
	slow.armed.Store(true) // the waiter's next read of a value times out once
	close(release)
	for range 2 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads; want 1", n)
	}
	if slow.stalled.Load() != 1 {
		t.Fatalf("%d reads timed out; want 1 (the fault did not happen)", slow.stalled.Load())
	}
	noFailOpen(t, []*corral.Cache{holder, waiter})
	if st := waiter.Stats(); st.RedisErrors != 0 {
		t.Fatalf("the slow read reached the waiter as a Redis error: %+v", st)
	}
}

// slowReads makes a client's connections read one reply too slowly: once
// armed, the first read after a command that reads an entry (HMGET) waits
// for the connection's read deadline, as a client that gets the CPU too
// late to read a large reply in time would, and fails with the real
// timeout.
type slowReads struct {
	armed   atomic.Bool  // the next read of an entry stalls
	stalled atomic.Int32 // reads stalled
}

func (s *slowReads) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: conn, s: s}, nil
}

type slowConn struct {
	net.Conn
	s        *slowReads
	mu       sync.Mutex // guards the fields below
	deadline time.Time
	stall    bool
}

func (c *slowConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *slowConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *slowConn) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("hmget")) && c.s.armed.CompareAndSwap(true, false) {
		c.mu.Lock()
		c.stall = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *slowConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	stall, deadline := c.stall, c.deadline
	c.stall = false
	c.mu.Unlock()
	if stall && !deadline.IsZero() {
		c.s.stalled.Add(1)
		time.Sleep(time.Until(deadline)) // the fault: this client reads too late
	}
	return c.Conn.Read(b)
}
