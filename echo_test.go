package corral_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// A flight whose callers contend for a key (its peek handed more than one
// over) listens on the key's channel while its first fetch.lua is out
// (notify's Listen). fetch.lua, when it says WAIT, publishes on the
// flight's echo channel, subscribed in the same command, and the number
// that heard tells the flight whether it was listening before the script
// ran: if so, it waits for the notice with no second fetch.lua; if not,
// it fetches again once subscribed, as a notice may have gone out before.

// contend starts n Fetches of key on c, all callers of one peek (held by
// peeks until they all wait for it), and returns their results.
func contend(t *testing.T, c *corral.Cache, key string, n int, peeks chan struct{}) <-chan fetched {
	t.Helper()
	got := make(chan fetched, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			v, err := c.Fetch(ctx, key, time.Minute, value("not mine"))
			got <- fetched{string(v), err}
		}()
	}
	eventually(t, 10*time.Second, "every caller waits for the peek", func() bool { return corral.PeekCallers(c, key) == n })
	close(peeks)
	return got
}

// gatePeeks returns a client of srv whose peeks of key wait for the
// returned channel to close, and which counts its fetch.lua calls in
// fetches, calling onFetch (if set) before each.
func gatePeeks(t *testing.T, rdb *redis.Client, key string, fetches *atomic.Int32, onFetch func()) chan struct{} {
	t.Helper()
	peeks := make(chan struct{})
	fetchSHA := scriptSHA(t, "fetch")
	f := &faults{}
	f.setBefore(func(cmd redis.Cmder) error {
		switch {
		case isPeek(cmd, key):
			<-peeks
		case isScript(cmd, fetchSHA):
			fetches.Add(1)
			if onFetch != nil {
				onFetch()
			}
		}
		return nil
	})
	rdb.AddHook(f)
	return peeks
}

// subscribed polls until channel has a shard subscriber, for up to 10 s.
func subscribed(admin *redis.Client, channel string) error {
	ctx := context.Background()
	if testkit.Within(10*time.Second, time.Millisecond, func() bool {
		return admin.PubSubShardNumSub(ctx, channel).Val()[channel] > 0
	}) {
		return nil
	}
	return errors.New("not subscribed in 10 s")
}

func TestEcho_WaiterFetchesOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newCache(t, srv.Client(), &corral.Options{LeaseTTL: 30 * time.Second})
	finish := hold(t, holder, "k", []byte("v"), nil)
	notice := wire.NewNames("corral", "k").Notice
	admin := srv.Client()
	var fetches atomic.Int32
	var subErr error
	rdb := srv.Client()
	peeks := gatePeeks(t, rdb, "k", &fetches, func() {
		subErr = subscribed(admin, notice) // fetch.lua runs once the waiter listens
	})
	waiter := newCache(t, rdb, nil)
	const n = 10
	got := contend(t, waiter, "k", n, peeks)
	eventually(t, 10*time.Second, "the waiter waits", func() bool { return waiter.Stats().Waits == 1 })
	finish()
	for range n {
		if r := <-got; r.v != "v" || r.err != nil {
			t.Fatalf("Fetch = %q, %v; want the holder's value", r.v, r.err)
		}
	}
	if subErr != nil {
		t.Fatal(subErr)
	}
	st := waiter.Stats()
	if fetches.Load() != 1 || st.Waited != n || st.Joined != n-1 || st.Loads != 0 {
		t.Fatalf("%d fetch.lua, stats %+v; want 1 fetch.lua and %d callers that waited", fetches.Load(), st, n)
	}
}

// gatedConn holds back, from the first write that subscribes on, what is
// written to it until gate closes, as a slow network would: the writes
// return at once, and reach the server in order once the gate opens.
type gatedConn struct {
	net.Conn
	gate <-chan struct{}
	mu   sync.Mutex
	held chan []byte // nil until a write subscribes
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil && bytes.Contains(bytes.ToLower(b), []byte("ssubscribe")) {
		c.held = make(chan []byte, 64)
		go func(held <-chan []byte) { // ends once the gate opens (at the latest when the test ends) and held is closed
			<-c.gate
			for p := range held {
				_, _ = c.Conn.Write(p)
			}
		}(c.held)
	}
	if c.held != nil {
		c.held <- bytes.Clone(b)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *gatedConn) Close() error {
	c.mu.Lock()
	if c.held != nil {
		close(c.held)
		c.held = make(chan []byte) // never written again: Close comes last
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// The holder commits between the waiter's fetch.lua and its
// subscription: the echo went unheard, so the waiter fetches again once
// subscribed, and finds the value at once, not at the lease's expiry.
func TestEcho_NotHeardFetchesAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newCache(t, srv.Client(), &corral.Options{LeaseTTL: 30 * time.Second})
	finish := hold(t, holder, "k", []byte("v"), nil)
	subs := make(chan struct{})
	var opened sync.Once
	open := func() { opened.Do(func() { close(subs) }) }
	t.Cleanup(open)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &gatedConn{Conn: c, gate: subs}, nil
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := srv.Client()
	entry := wire.EntryName("corral", "k")
	var fetches atomic.Int32
	var once sync.Once
	var commitErr error
	peeks := gatePeeks(t, rdb, "k", &fetches, nil)
	f := &faults{}
	f.setAfter(func(cmd redis.Cmder) error {
		if !isScript(cmd, scriptSHA(t, "fetch")) {
			return nil
		}
		once.Do(func() { // the first fetch.lua said WAIT, unheard: the load ends now
			finish()
			if !testkit.Within(10*time.Second, time.Millisecond, func() bool {
				return admin.Exists(context.Background(), entry).Val() == 1
			}) {
				commitErr = errors.New("the holder did not commit in 10 s")
			}
			open()
		})
		return nil
	})
	rdb.AddHook(f)
	waiter := newCache(t, rdb, nil)
	const n = 10
	got := contend(t, waiter, "k", n, peeks)
	for range n {
		if r := <-got; r.v != "v" || r.err != nil {
			t.Fatalf("Fetch = %q, %v; want the holder's value, found on fetching again", r.v, r.err)
		}
	}
	if commitErr != nil {
		t.Fatal(commitErr)
	}
	if st := waiter.Stats(); fetches.Load() != 2 || st.Waits != 1 || st.Waited != n || st.Loads != 0 {
		t.Fatalf("%d fetch.lua, stats %+v; want 2 (WAIT, then the value) and %d callers that waited", fetches.Load(), st, n)
	}
}

// The echo says the waiter's subscription was on when fetch.lua ran; it
// does not say the connection that had it lived to deliver what came
// after. Here the pub/sub connection drops after the server ran the
// subscription and the script, before the client read the confirmation or
// the echo, and stays down (its dials refused) while the holder commits:
// the notice is lost with it, and go-redis's subscription on the new
// connection looks like the first. The waiter, whose echo never reached
// it, fetches again confirmWait (250 ms) after its WAIT and finds the
// value; it used to wait for the lease to expire (30 s).
func TestEcho_HeardThenLostFetchesAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	holder := newCache(t, srv.Client(), &corral.Options{LeaseTTL: 30 * time.Second})
	finish := hold(t, holder, "k", []byte("v"), nil)
	proxy := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := srv.Client()
	var fetches atomic.Int32
	var first sync.Once
	var subErr error
	peeks := gatePeeks(t, rdb, "k", &fetches, func() {
		first.Do(func() { subErr = subscribed(admin, wire.NewNames("corral", "k").Notice) }) // heard: the script runs once the subscription has
	})
	waiter := newCache(t, rdb, &corral.Options{LeaseTTL: 30 * time.Second})
	cut := proxy.HoldThenCut([]byte("ssubscribe"), []byte("smessage"))
	const n = 4
	got := contend(t, waiter, "k", n, peeks)
	var cutAt time.Time
	select {
	case <-cut:
		cutAt = time.Now()
	case <-time.After(10 * time.Second):
		t.Fatalf("the waiter's confirmation and echo did not come in 10 s (%v)", subErr)
	}
	finish() // the notice goes out while the waiter cannot hear it
	eventually(t, 10*time.Second, "the holder commits", func() bool {
		return admin.Exists(context.Background(), wire.EntryName("corral", "k")).Val() == 1
	})
	if err := proxy.Refuse(false); err != nil { // go-redis dials again, and subscribes again
		t.Fatal(err)
	}
	for range n {
		select {
		case r := <-got:
			if r.v != "v" || r.err != nil {
				t.Fatalf("Fetch = %q, %v; want the holder's value", r.v, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a caller still waits 5 s after the commit (%d fetch.lua): the lost notice was left to the lease's expiry", fetches.Load())
		}
	}
	t.Logf("answered %v after the connection was cut, %d fetch.lua", time.Since(cutAt).Round(time.Millisecond), fetches.Load())
	if f := fetches.Load(); f < 2 {
		t.Fatalf("%d fetch.lua; want the WAIT, then at least one more", f)
	}
}
