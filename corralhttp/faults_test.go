package corralhttp_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
)

// TestRedisFaults: however Redis fails, a Redis fault is not the origin's.
// For each fault, 50 concurrent GETs of one URL, all under way while the
// origin holds its answer, then 10 one after the other, all get the
// origin's body, never a 5xx; the origin is asked as the fault allows: once
// for the 50 and not again (answered from memory: FailSafe.Throttle is a
// minute here) while the Cache cannot use Redis or Redis refuses writes,
// which still serves what it holds; once per request (passed) while the ACL
// user lacks a right corral needs. A POST is passed as ever; a URL the
// origin fails for still gets 502. Health names the fault, and the log has
// one line for it, with a request's path, not one per request.
func TestRedisFaults(t *testing.T) {
	const n, m = 50, 10
	for _, f := range redisFaults() {
		t.Run(f.name, func(t *testing.T) {
			rdb := f.setup(t)
			release := make(chan struct{})
			var xs atomic.Int64 // GETs of /x at the origin
			o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
				switch {
				case r.Method == http.MethodPost:
					io.WriteString(w, "posted")
					return
				case r.URL.Path == "/broken":
					panic(http.ErrAbortHandler)
				case r.URL.Path == "/x":
					xs.Add(1)
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}
				w.Header().Set("Cache-Control", "max-age=60")
				io.WriteString(w, "body of "+r.URL.Path)
			})
			open := sync.OnceFunc(func() { close(release) })
			t.Cleanup(open) // before the origin closes
			var logged testkit.Buffer
			h := newHandlerOn(t, rdb, o, func(o *corralhttp.Options) {
				o.Logger = slog.New(slog.NewTextHandler(&logged, nil))
				o.Cache.RedisTimeout = 200 * time.Millisecond
				o.Cache.FailSafe.Throttle = time.Minute // answered from memory however slow the machine
			})
			if w := get(t, h, "/warm"); w.Code != 200 || w.Body.String() != "body of /warm" {
				t.Fatalf("GET /warm: %d %q", w.Code, w.Body.String())
			}
			if f.during != nil {
				f.during(t)
			}

			joined := h.Stats().Joined
			ws := make([]*httptestRecorder, n)
			done := make(chan struct{})
			go func() {
				defer close(done)
				parallel(n, func(i int) { ws[i] = get(t, h, "/x") })
			}()
			eventually(t, "the requests under way together", func() bool {
				if f.passes {
					return xs.Load() == n
				}
				return xs.Load() == 1 && h.Stats().Joined-joined >= n-1
			})
			open()
			<-done
			xc := map[string]int{}
			for _, w := range ws {
				xc[w.Header().Get("X-Cache")]++
				if w.Code != 200 || w.Body.String() != "body of /x" {
					t.Fatalf("GET /x: %d %q (X-Cache %q); want 200 and the origin's body", w.Code, w.Body.String(), w.Header().Get("X-Cache"))
				}
			}
			burst := xs.Load()
			want := map[string]int{corralhttp.Miss: 1, corralhttp.Coalesced: n - 1}
			if f.passes {
				want = map[string]int{corralhttp.Pass: n}
			}
			if burst != int64(want[corralhttp.Pass]+want[corralhttp.Miss]) || !equalCounts(xc, want) {
				t.Errorf("%d concurrent GETs: %d origin requests, X-Cache %v; want %v", n, burst, xc, want)
			}

			later, each := corralhttp.Hit, int64(0) // from memory
			if f.passes {
				later, each = corralhttp.Pass, 1
			}
			for range m {
				expect(t, get(t, h, "/x"), later, 200, "body of /x")
			}
			if got := xs.Load() - burst; got != each*m {
				t.Errorf("%d GETs after them: %d origin requests, want %d", m, got, each*m)
			}
			if f.holds {
				before := o.requests.Load()
				expect(t, get(t, h, "/warm"), corralhttp.Hit, 200, "body of /warm")
				if o.requests.Load() != before {
					t.Errorf("GET /warm, stored before the fault, reached the origin")
				}
			}
			for range 3 {
				r := newRequest("/x")
				r.Method = http.MethodPost
				expect(t, serve(h, r), corralhttp.Pass, 200, "posted")
			}
			if w := get(t, h, "/broken"); w.Code != http.StatusBadGateway {
				t.Errorf("GET of a URL the origin fails for: %d %q; want 502", w.Code, w.Body.String())
			}
			t.Logf("origin requests for /x: %d for the %d concurrent GETs, %d for the %d after them", burst, n, xs.Load()-burst, m)

			err := h.Health()
			var fault *corralhttp.Fault
			if !errors.Is(err, f.sentinel) || !errors.As(err, &fault) || fault.Reason != f.reason || fault.Serving != f.serving {
				t.Errorf("Health() = %v; want a *Fault for %v: %q; %q", err, f.sentinel, f.reason, f.serving)
			}
			checkFaultLog(t, logged.String(), f.level)
		})
	}
}

// httptestRecorder is the recorder get returns.
type httptestRecorder = httptest.ResponseRecorder

// equalCounts reports whether got and want hold the same non-zero counts.
func equalCounts(got, want map[string]int) bool {
	for k, v := range want {
		if v != 0 && got[k] != v {
			return false
		}
	}
	for k, v := range got {
		if v != want[k] {
			return false
		}
	}
	return true
}

// checkFaultLog checks the log of a Handler that met one Redis fault: one
// line for it from the Handler, at level, with a request's path; no line
// blaming the origin; and no more than a few warnings and errors in all
// (corral's own, each once: the breaker opening, a right denied...), not
// one per request.
func checkFaultLog(t *testing.T, log, level string) {
	t.Helper()
	var noisy, ours []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			noisy = append(noisy, line)
		}
		if strings.Contains(line, `msg="corral: Redis fault, not the origin's: `) {
			ours = append(ours, line)
		}
		if strings.Contains(line, "the origin failed") && !strings.Contains(line, "path=/broken") {
			t.Errorf("a line blames the origin: %s", line)
		}
	}
	if len(ours) != 1 || !strings.Contains(ours[0], "level="+level) || !strings.Contains(ours[0], " path=/") {
		t.Errorf("the Handler's lines for the fault: %q; want one, at %s, with the path", ours, level)
	}
	if len(noisy) > 5 {
		t.Errorf("%d warnings and errors; want a few, none per request:\n%s", len(noisy), strings.Join(noisy, "\n"))
	}
	t.Logf("warnings and errors:\n%s", strings.Join(noisy, "\n"))
}

// redisFault is one way Redis can fail a Handler.
type redisFault struct {
	name string
	// setup starts the Redis of the fault and returns the client the
	// Handler uses.
	setup func(t *testing.T) redis.UniversalClient
	// during, if set, brings the fault on once the Handler has used Redis.
	during func(t *testing.T)

	sentinel        error  // what Health wraps
	reason, serving string // Health's Fault
	level           string // of the Handler's log line
	passes          bool   // requests are passed to the origin, each on its own
	holds           bool   // Redis serves what it holds: /warm, stored before the fault
}

func redisFaults() []redisFault {
	var srv *redistest.Server
	var proxy *redistest.Proxy
	const failOpen, held = "serving from memory and the origin", "serving what redis holds; misses from memory and the origin"
	return []redisFault{
		{name: "NOPERM", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.Start(t)
			srv.AddUser(t, "app", "pw", "~*", "&*", "+@all", "-evalsha", "-eval")
			return userClient(srv, "app", "pw")
		}, sentinel: corral.ErrPermission, reason: "redis denies a right corral needs (NOPERM)",
			serving: "passing the requests that need it to the origin, each on its own", level: "ERROR", passes: true},
		{name: "WRONGPASS", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.Start(t)
			srv.AddUser(t, "app", "pw", "~*", "&*", "+@all")
			return userClient(srv, "app", "wrong")
		}, sentinel: corral.ErrCircuitOpen, reason: "redis refuses the cache's calls (WRONGPASS)", serving: failOpen, level: "ERROR"},
		{name: "password changed", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.Start(t)
			srv.AddUser(t, "app", "pw", "~*", "&*", "+@all")
			return userClient(srv, "app", "pw")
		}, during: func(t *testing.T) { srv.ChangePassword(t, "app") },
			sentinel: corral.ErrCircuitOpen, reason: "redis refuses the cache's calls (WRONGPASS)", serving: failOpen, level: "ERROR"},
		{name: "OOM", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.Start(t)
			return srv.Client()
		}, during: func(t *testing.T) { srv.OutOfMemory(t) },
			sentinel: corral.ErrWriteRefused, reason: "redis refuses writes (OOM)", serving: held, level: "WARN", holds: true},
		{name: "READONLY", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.StartReplica(t)
			return srv.Client()
		}, sentinel: corral.ErrWriteRefused, reason: "redis refuses writes (READONLY)", serving: held, level: "WARN"},
		{name: "killed", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.Start(t)
			return srv.Client()
		}, during: func(*testing.T) { srv.Kill() },
			sentinel: corral.ErrCircuitOpen, reason: "redis refuses connections", serving: failOpen, level: "WARN"},
		{name: "proxy refusing", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.Start(t)
			proxy = redistest.StartProxy(t, srv.Addr)
			return proxyClient(t, proxy)
		}, during: func(t *testing.T) {
			if err := proxy.Refuse(true); err != nil {
				t.Fatal(err)
			}
		}, sentinel: corral.ErrCircuitOpen, reason: "redis refuses connections", serving: failOpen, level: "WARN"},
		{name: "silent", setup: func(t *testing.T) redis.UniversalClient {
			srv = redistest.Start(t)
			proxy = redistest.StartProxy(t, srv.Addr)
			return proxyClient(t, proxy)
		}, during: func(*testing.T) { proxy.Blackhole(true) },
			sentinel: corral.ErrRedisTimeout, reason: "redis does not answer", serving: failOpen, level: "WARN"},
	}
}

// proxyClient returns a client of Redis through p, closed when the test
// ends.
func proxyClient(t *testing.T, p *redistest.Proxy) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// userClient returns a client of srv that logs in as the ACL user name.
func userClient(srv *redistest.Server, name, password string) *redis.Client {
	return srv.Client(func(o *redis.Options) { o.Username, o.Password = name, password })
}
