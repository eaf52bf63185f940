package corral_test

// Slow is not down: under load, with big values and through Redis stalls,
// corral keeps to one origin load per key across the fleet. "Process" is an
// independent Cache with its own client (its own connection pool).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// processes returns n Caches on srv, each with a client of its own.
func processes(t *testing.T, srv *redistest.Server, n int, opts func() *corral.Options, client ...func(*redis.Options)) []*corral.Cache {
	t.Helper()
	caches := make([]*corral.Cache, n)
	for i := range caches {
		var o *corral.Options
		if opts != nil {
			o = opts()
		}
		caches[i] = newCache(t, srv.Client(client...), o)
	}
	return caches
}

// clientKinds are the two ways corral reads hits: through its pipeline
// (go-redis's default client), and in the caller's goroutine (a client that
// bounds its I/O by the context's deadline). Tests of stalls run with both.
var clientKinds = []struct {
	name string
	opts func(*redis.Options)
}{
	{"default client", func(*redis.Options) {}},
	{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
}

// loadCounter counts loads per key.
type loadCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *loadCounter) add(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[key]++
}

// extra returns the loads of keys beyond their first, and the keys never
// loaded.
func (l *loadCounter) extra(keys []string) (extra int, missing []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		switch n := l.n[k]; {
		case n == 0:
			missing = append(missing, k)
		case n > 1:
			extra += n - 1
		}
	}
	return extra, missing
}

// leasesLost sums the caches' LeasesLost: loads whose lease expired or was
// revoked while they ran, each of which may let one other load begin.
func leasesLost(caches []*corral.Cache) (n uint64) {
	for _, c := range caches {
		n += c.Stats().LeasesLost
	}
	return n
}

// failedOpen counts the caches that failed open at least once: each loads
// a key once itself while it does (a fail-open load is shared per process).
func failedOpen(caches []*corral.Cache) (n int) {
	for _, c := range caches {
		if c.Stats().FailOpens > 0 {
			n++
		}
	}
	return n
}

// notOnce returns the keys not loaded exactly once.
func (l *loadCounter) notOnce(keys []string) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	bad := map[string]int{}
	for _, k := range keys {
		if l.n[k] != 1 {
			bad[k] = l.n[k]
		}
	}
	return bad
}

// noFailOpen fails t if any Cache failed open.
func noFailOpen(t *testing.T, caches []*corral.Cache) {
	t.Helper()
	for i, c := range caches {
		if st := c.Stats(); st.FailOpens != 0 || st.BreakerOpens != 0 {
			t.Fatalf("process %d failed open: %+v", i, st)
		}
	}
}

// 8 processes ask for the same 1,000 cold keys at once, two goroutines per
// key in each: every key is loaded, and nobody fails open although the
// calls far outnumber each client's connections (a pool of 10 per CPU).
// 16,000 goroutines under -race, beside the other packages' tests, starve
// the clients of CPU for seconds: that too is slow, not down (internal/transport/probe.go).
// What the product guarantees under that starvation is one load per key
// while its lease holds: a holder starved past its LeaseTTL loses the lease
// (counted in LeasesLost) and another process may then load the key again,
// so every load beyond a key's first must be matched by a lost lease. On a
// machine with CPU to spare no lease is lost and every key loads once.
func TestLoad_ThousandColdKeys(t *testing.T) {
	const procs, keysN, perKey = 8, 1000, 2
	srv := redistest.Start(t)
	caches := processes(t, srv, procs, nil)
	keys := make([]string, keysN)
	for i := range keys {
		keys[i] = "cold:" + strconv.Itoa(i)
	}
	var loads loadCounter
	var wrong atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range caches {
		for _, k := range keys {
			for range perKey {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					v, err := c.Fetch(ctx, k, time.Minute, func(ctx context.Context) ([]byte, error) {
						loads.add(k)
						return slow(50*time.Millisecond, nil, "v:"+k)(ctx)
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
	close(start)
	wg.Wait()
	loadedOnce(t, caches, &loads, keys)
	noFailOpen(t, caches)
}

// loadedOnce fails t unless every key was loaded, and loaded once but for
// one more load at most per lease lost across caches: a holder starved of
// CPU past its LeaseTTL loses its lease, and another process loads the key
// again, by design (the watchdog's renewals could not reach Redis in time).
func loadedOnce(t *testing.T, caches []*corral.Cache, loads *loadCounter, keys []string) {
	t.Helper()
	extra, missing := loads.extra(keys)
	if len(missing) > 0 {
		t.Fatalf("%d keys never loaded, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
	if lost := leasesLost(caches); uint64(extra) > lost {
		t.Fatalf("%d loads beyond each key's first, with %d leases lost (key: loads, e.g. %v); want at most one per lost lease",
			extra, lost, sample(loads.notOnce(keys)))
	} else if extra > 0 {
		t.Logf("%d extra loads, %d leases lost: the holders were starved past their LeaseTTL", extra, lost)
	}
}

func sample(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if len(out) == 5 {
			break
		}
		out[k] = v
	}
	return out
}

// bigValue is a value of n bytes that is not all alike.
func bigValue(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>11)
	}
	return b
}

// A cold stampede on one key whose value is large: one load, and every
// caller of every process gets the whole value. The transfer of a value is
// never taken for a Redis that stopped answering; Redis itself stalling past
// the clients' patience is (see the end of the test).
func TestLoad_BigValues(t *testing.T) {
	for _, tc := range []struct {
		size       int
		goroutines int // per process; each caller gets a copy of its own
	}{
		{1 << 20, 20},
		{16 << 20, 20},
		{64 << 20, 2},
	} {
		t.Run(strconv.Itoa(tc.size>>20)+"MiB", func(t *testing.T) {
			const procs = 8
			srv := redistest.Start(t, "--latency-monitor-threshold", "100")
			caches := processes(t, srv, procs, nil)
			want := bigValue(tc.size)
			var loads atomic.Int32
			var wrong atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, c := range caches {
				for range tc.goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
						defer cancel()
						v, err := c.Fetch(ctx, "big", time.Minute, func(context.Context) ([]byte, error) {
							loads.Add(1)
							return want, nil
						})
						if err != nil || !bytes.Equal(v, want) {
							wrong.Add(1)
							t.Errorf("Fetch = %d bytes, %v; want the %d-byte value", len(v), err, len(want))
						}
					}()
				}
			}
			close(start)
			wg.Wait()
			// A process fails open only when Redis itself stopped
			// answering: copying 64 MiB into a script's arguments can
			// hold a starved redis-server for seconds, which its latency
			// monitor sees. Then that process loads once on its own.
			failedOpen := failedOpen(caches)
			if failedOpen > 0 {
				if longest := longestCommand(t, srv); longest < corral.DefaultRedisTimeout/4 {
					t.Fatalf("%d processes failed open while Redis's longest command took %v", failedOpen, longest)
				} else {
					t.Logf("%d processes failed open: Redis spent %v on one command", failedOpen, longest)
				}
			}
			// And a holder starved past its LeaseTTL while it wrote the
			// value loses its lease: another process loads it again.
			lost := int(leasesLost(caches))
			if n := int(loads.Load()); n < 1 || n > 1+failedOpen+lost {
				t.Fatalf("%d loads of a %d-byte value, %d processes failed open, %d leases lost; want 1 and at most one more per process that failed open or lease lost",
					n, tc.size, failedOpen, lost)
			}
		})
	}
}

// longestCommand is the longest event redis-server's latency monitor has
// seen (LATENCY LATEST; the server must run with latency-monitor-threshold).
func longestCommand(t *testing.T, srv *redistest.Server) time.Duration {
	t.Helper()
	rows, err := srv.Client().Do(context.Background(), "LATENCY", "LATEST").Slice()
	if err != nil {
		t.Fatalf("LATENCY LATEST: %v", err)
	}
	var longest time.Duration
	for _, r := range rows {
		if f, ok := r.([]any); ok && len(f) >= 4 {
			if ms, ok := f[3].(int64); ok {
				longest = max(longest, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	return longest
}

// Redis pauses (CLIENT PAUSE, as for a failover or a slow fork) for 700 ms,
// shorter than RedisTimeout: as the callers arrive, or while the load runs
// and its commit is sent. Either way: one load, nobody fails open, every
// caller gets the value.
func TestLoad_RedisPause(t *testing.T) {
	for _, kind := range clientKinds {
		for _, when := range []string{"as the callers arrive", "while the load runs"} {
			t.Run(kind.name+"/"+when, func(t *testing.T) { redisPause(t, when, kind.opts) })
		}
	}
}

func redisPause(t *testing.T, when string, client func(*redis.Options)) {
	const procs, goroutines = 8, 20
	srv := redistest.Start(t)
	admin := srv.Client()
	caches := processes(t, srv, procs, nil, client)
	ctx := context.Background()
	for _, c := range caches { // connections open, scripts loaded
		if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
			t.Fatal(err)
		}
	}
	loading := make(chan struct{})
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) {
		if loads.Add(1) == 1 {
			close(loading)
		}
		if when == "while the load runs" {
			// The load ends inside the pause: its commit waits for it.
			if err := admin.Do(ctx, "CLIENT", "PAUSE", "700", "ALL").Err(); err != nil {
				return nil, err
			}
		}
		return []byte("v"), nil
	}
	if when == "as the callers arrive" {
		if err := admin.Do(ctx, "CLIENT", "PAUSE", "700", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, c := range caches {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if v, err := c.Fetch(cctx, "{paused}", time.Minute, load); err != nil || string(v) != "v" {
					t.Errorf("Fetch = %q, %v", v, err)
				}
			}()
		}
	}
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads through a 700ms pause; want 1", n)
	}
	noFailOpen(t, caches)
}

// Close returns within RedisTimeout (plus scheduling) while Redis is
// paused for much longer, even with a client that waits for replies
// forever; once Redis answers again, nothing corral started is left
// running.
func TestLoad_CloseUnderALongPause(t *testing.T) {
	for _, client := range []struct {
		name string
		opts func(*redis.Options)
		near bool
	}{
		{"a client that waits for replies forever", func(o *redis.Options) { o.ReadTimeout = -1 }, false},
		{"a default client", func(*redis.Options) {}, false},
		{"a client bounding its reads by the context", func(o *redis.Options) { o.ContextTimeoutEnabled = true }, false},
		{"a client that waits forever, and the near cache", func(o *redis.Options) { o.ReadTimeout = -1 }, true},
	} {
		t.Run(client.name, func(t *testing.T) { closeUnderALongPause(t, client.opts, client.near) })
	}
}

func closeUnderALongPause(t *testing.T, opts func(*redis.Options), near bool) {
	srv := redistest.Start(t)
	admin := srv.Client()
	rdb := srv.Client(opts)
	sent := &faults{}
	rdb.AddHook(sent)
	ctx := context.Background()
	o := &corral.Options{RedisTimeout: 500 * time.Millisecond, Logger: testLogger(t)}
	if near {
		o.NearCache.Size = 100
	}
	c, err := corral.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	sentBefore := sent.commands.Load()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Fetch(ctx, "k"+strconv.Itoa(i), time.Minute, slow(time.Second, nil, "v"))
		}()
	}
	eventually(t, 5*time.Second, "the calls are sent", func() bool { return sent.commands.Load() > sentBefore })
	t0 := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 500*time.Millisecond+slack {
		t.Fatalf("Close took %v with Redis paused; want about RedisTimeout (500ms)", took)
	}
	wg.Wait()
	// The pause ends after 3s; the client then gets its replies.
	var leaked error
	for deadline := paused.Add(20 * time.Second); time.Now().Before(deadline); {
		if leaked = goleak.Find(before); leaked == nil {
			return
		}
	}
	t.Fatalf("20s after the pause began: %v", leaked)
}

// A loaded value over MaxValueBytes reaches the callers of its load but is
// not stored; another process's waiters load it themselves; Set refuses it.
func TestLoad_ValueTooLarge(t *testing.T) {
	const limit = 1 << 20
	srv := redistest.Start(t)
	opts := func() *corral.Options { return &corral.Options{MaxValueBytes: limit} }
	caches := processes(t, srv, 2, opts)
	holder, waiter := caches[0], caches[1]
	ctx := context.Background()
	huge := bigValue(2 * limit)
	started, gate := make(chan struct{}), make(chan struct{})
	got := make(chan error, 1)
	go func() {
		v, err := holder.Fetch(ctx, "{huge}", time.Minute, func(context.Context) ([]byte, error) {
			close(started)
			<-gate
			return huge, nil
		})
		if err == nil && !bytes.Equal(v, huge) {
			err = fmt.Errorf("got %d bytes", len(v))
		}
		got <- err
	}()
	<-started
	var waiterLoads atomic.Int32
	waited := make(chan error, 1)
	go func() {
		v, err := waiter.Fetch(ctx, "{huge}", time.Minute, func(context.Context) ([]byte, error) {
			waiterLoads.Add(1)
			return huge, nil
		})
		if err == nil && !bytes.Equal(v, huge) {
			err = fmt.Errorf("got %d bytes", len(v))
		}
		waited <- err
	}()
	waitSubscribed(t, srv.Client(), "corral:n:{huge}:{huge}", 1)
	close(gate)
	if err := <-got; err != nil {
		t.Fatalf("the holder's caller: %v; want the value", err)
	}
	if err := <-waited; err != nil || waiterLoads.Load() != 1 {
		t.Fatalf("the waiter: %v after %d loads; want the value from a load of its own", err, waiterLoads.Load())
	}
	if _, err := holder.Get(ctx, "{huge}"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get = %v; want ErrMiss: the value is not stored", err)
	}
	if st := holder.Stats(); st.ValuesTooLarge != 1 || st.FailOpens != 0 {
		t.Fatalf("holder stats %+v; want ValuesTooLarge 1", st)
	}
	if err := holder.Set(ctx, "{huge}", huge, time.Minute); !errors.Is(err, corral.ErrValueTooLarge) {
		t.Fatalf("Set over the limit = %v; want ErrValueTooLarge", err)
	}
	if err := holder.Set(ctx, "{huge}", huge[:limit], time.Minute); err != nil {
		t.Fatalf("Set at the limit = %v", err)
	}
}

// A holder's commit that gets no answer is sent again until it lands, and
// waiters elsewhere hear of it at once, not when the lease expires (30s
// here): whether the first try was lost on the way to Redis, or landed and
// only its reply was lost (commit.lua then knows it by the token it left).
func TestLoad_CommitRetriedUntilItLands(t *testing.T) {
	for _, lost := range []string{"the try", "the reply"} {
		t.Run("lost "+lost, func(t *testing.T) {
			e := newEnv(t, nil)
			rdb, hook := e.faultyClient()
			opts := func() *corral.Options { return &corral.Options{LeaseTTL: 30 * time.Second} }
			holder := newCache(t, rdb, opts())
			waiter := newCache(t, e.srv.Client(), opts())
			ctx := context.Background()
			commitSHA := scriptSHA(t, "commit")
			var tries atomic.Int32
			drop := func(cmd redis.Cmder) error {
				if isScript(cmd, commitSHA) && tries.Add(1) == 1 {
					return &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
				}
				return nil
			}
			if lost == "the try" {
				hook.setBefore(drop)
			} else {
				hook.setAfter(drop)
			}
			finish := hold(t, holder, "{cr}", []byte("v"), nil)
			got := make(chan string, 1)
			go func() {
				v, err := waiter.Fetch(ctx, "{cr}", time.Minute, value("not me"))
				got <- fmt.Sprintf("%s %v", v, err)
			}()
			waitSubscribed(t, e.rdb, "corral:n:{cr}:{cr}", 1)
			ended := time.Now()
			finish()
			select {
			case g := <-got:
				if g != "v <nil>" || time.Since(ended) > prompt {
					t.Fatalf("waiter got %q %v after the load; want the value at once", g, time.Since(ended))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter is still waiting 10s after the load")
			}
			eventually(t, 10*time.Second, "the commit is sent again", func() bool { return holder.Stats().CommitRetries > 0 })
			if st := holder.Stats(); st.CommitsRejected != 0 || st.FailOpens != 0 {
				t.Fatalf("holder stats %+v; want a retried commit, none rejected", st)
			}
			if v, err := holder.Get(ctx, "{cr}"); err != nil || string(v) != "v" {
				t.Fatalf("Get = %q, %v", v, err)
			}
		})
	}
}

// A fetch.lua whose reply is lost (here the connection drops as the reply
// passes, and the client does not retry) may still have run and taken the
// lease. The flight fails open, and then commits its value under that
// lease's token, so waiters in other processes are answered at once instead
// of at the lease's expiry.
func TestLoad_FailOpenCommitsUnderItsLease(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	cutRdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	t.Cleanup(func() { cutRdb.Close() })
	holder := newCache(t, cutRdb, &corral.Options{LeaseTTL: 30 * time.Second})
	waiter := newCache(t, srv.Client(), &corral.Options{LeaseTTL: 30 * time.Second})
	ctx := context.Background()
	if _, err := holder.Fetch(ctx, "warm", time.Minute, value("w")); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client()
	proxy.CutOnReply([]byte("LOAD")) // fetch.lua granted the lease; the reply is lost
	loading, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		v, err := holder.Fetch(ctx, "{fo}", time.Minute, func(context.Context) ([]byte, error) {
			close(loading) // only after fetch.lua's reply was lost: fail-open
			<-gate
			return []byte("v"), nil
		})
		if err == nil && string(v) != "v" {
			err = fmt.Errorf("got %q", v)
		}
		done <- err
	}()
	eventually(t, 10*time.Second, "fetch.lua took the lease", func() bool { return admin.Exists(ctx, leaseName("fo")).Val() == 1 })
	got := make(chan string, 1)
	go func() {
		v, err := waiter.Fetch(ctx, "{fo}", time.Minute, value("not me"))
		got <- fmt.Sprintf("%s %v", v, err)
	}()
	waitSubscribed(t, admin, "corral:n:{fo}:{fo}", 1)
	<-loading
	ended := time.Now()
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("holder: %v", err)
	}
	select {
	case g := <-got:
		if g != "v <nil>" {
			t.Fatalf("waiter got %q; want the fail-open load's value", g)
		}
		t.Logf("waiter answered %v after the fail-open load", time.Since(ended).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter is still waiting 15s after the fail-open load: the lease was left to expire")
	}
}

// Errors and warnings name what went wrong with Redis, not only that it did.
func TestLoad_ErrorsNameTheirCause(t *testing.T) {
	srv := redistest.Start(t)
	var logged testkit.Buffer
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	c := newCache(t, rdb, &corral.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)), BreakerThreshold: 2, BreakerCooldown: time.Minute})
	ctx := context.Background()
	c.Fetch(ctx, "warm", time.Minute, value("w"))
	srv.Kill()
	for i := range 3 {
		if v, err := c.Fetch(ctx, "k"+strconv.Itoa(i), time.Minute, value("v")); err != nil || string(v) != "v" {
			t.Fatalf("Fetch with Redis down = %q, %v; want fail-open", v, err)
		}
	}
	// A killed server is seen first either as a refused dial or as the
	// probe's connection reset (which of them comes first is the
	// scheduler's): either way the warning says it.
	if l := logged.String(); !strings.Contains(l, "connection refused") && !strings.Contains(l, "connection reset") {
		t.Fatalf("the warnings do not say the connection was refused or reset:\n%s", l)
	}
	_, err := c.Get(ctx, "never fetched") // a key not held in memory: the error, not a value
	if !errors.Is(err, corral.ErrCircuitOpen) || !strings.Contains(err.Error(), "connection refused") && !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("Get with the breaker open = %v; want ErrCircuitOpen naming the refused (or reset) connection", err)
	}
}
