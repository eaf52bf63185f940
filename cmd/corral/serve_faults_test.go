package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
)

// TestServeRedisFaults: a `corral serve` process whose Redis fails, in each
// of these ways, answers 50 concurrent GETs of one URL, all written before
// the origin answers, with the origin's body: never a 5xx. The origin is
// asked as the fault allows: once for the 50 while the sidecar cannot use
// Redis or Redis refuses writes (fail-open, one load per URL at a time),
// once per request while the ACL user may not run scripts (each passed).
// /healthz answers 200, degraded, naming the fault by its reply's code at
// most; the log has one line of the sidecar's for the fault, with the
// path, and no line per request; the password is nowhere.
func TestServeRedisFaults(t *testing.T) {
	t.Parallel()
	const n = 50
	password := "pw-" + hotBody(t)[:16]
	const failOpen = "serving from memory and the origin"
	const held = "serving what redis holds; misses from memory and the origin"
	for _, tc := range []struct {
		name string
		// start starts the Redis of the fault and returns the sidecar's
		// --redis and, if the fault comes after the sidecar has used
		// Redis, what brings it on.
		start   func(t *testing.T) (url string, fault func())
		origin  int    // origin requests for the n GETs
		healthz string // /healthz's line after them
		level   string // of the sidecar's line for the fault
	}{
		{"NOPERM on EVALSHA", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			srv.AddUser(t, "app", password, "~*", "&*", "+@all", "-evalsha", "-eval")
			return "redis://app:" + password + "@" + srv.Addr, nil
		}, n, "degraded: redis denies a right corral needs (NOPERM); passing the requests that need it to the origin, each on its own", "ERROR"},
		{"WRONGPASS", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			srv.AddUser(t, "app", password, "~*", "&*", "+@all")
			return "redis://app:wrong-" + password + "@" + srv.Addr, nil
		}, 1, "degraded: redis refuses PING (WRONGPASS); " + failOpen, "ERROR"},
		{"password changed", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			srv.AddUser(t, "app", password, "~*", "&*", "+@all")
			return "redis://app:" + password + "@" + srv.Addr, func() { srv.ChangePassword(t, "app") }
		}, 1, "degraded: redis refuses PING (WRONGPASS); " + failOpen, "ERROR"},
		{"OOM", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			return srv.URL(), func() { srv.OutOfMemory(t) }
		}, 1, "degraded: redis refuses writes (OOM); " + held, "WARN"},
		{"READONLY", func(t *testing.T) (string, func()) {
			return redistest.StartReplica(t).URL(), nil
		}, 1, "degraded: redis refuses writes (READONLY); " + held, "WARN"},
		{"killed", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			return srv.URL(), srv.Kill
		}, 1, "degraded: redis refuses connections; " + failOpen, "WARN"},
		{"proxy refusing", func(t *testing.T) (string, func()) {
			srv := redistest.Start(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			return "redis://" + proxy.Addr, func() {
				if err := proxy.Refuse(true); err != nil {
					t.Fatal(err)
				}
			}
		}, 1, "degraded: redis refuses connections; " + failOpen, "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, fault := tc.start(t)
			g := newGate()
			org := startOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/x" {
					g.wait(r)
				}
				w.Header().Set("Cache-Control", "max-age=60")
				fmt.Fprint(w, "body of "+r.URL.Path)
			})
			t.Cleanup(g.open) // before the origin closes
			s := startSidecar(t, []string{"CORRAL_SERVE_REDIS=" + url}, "--origin", org.URL, "--redis-timeout", "200ms")
			c := client(t)
			if r := fetch(c, s.URL+"/warm", nil); r.err != nil || r.code != 200 || r.body != "body of /warm" {
				t.Fatalf("GET /warm: %+v; want 200 from the origin", r)
			}
			if fault != nil {
				fault()
			}
			rs := concurrently(t, c, n, g, func(int) string { return s.URL + "/x" })
			if err := errorsIn(rs); err != nil {
				t.Fatalf("client errors: %v", err)
			}
			xc := map[string]int{}
			for _, r := range rs {
				xc[r.xcache]++
				if r.code != 200 || r.body != "body of /x" {
					t.Fatalf("GET /x: %+v; want 200 and the origin's body", r)
				}
			}
			if got := org.requests("/x"); got != tc.origin {
				t.Errorf("%d concurrent GETs: %d origin requests, want %d (X-Cache %v)", n, got, tc.origin, xc)
			}
			code, health, err := get(s.Admin + "/healthz")
			if err != nil || code != 200 || health != tc.healthz+"\n" {
				t.Errorf("/healthz: %d %q, %v; want 200 %q", code, health, err, tc.healthz)
			}
			t.Logf("origin requests for /x: %d; X-Cache %v; /healthz %q", org.requests("/x"), xc, health)
			if err := s.stop(); err != nil {
				t.Errorf("sidecar: %v", err)
			}
			out := s.out.String()
			checkFaultLines(t, out, tc.level)
			mustNotContain(t, "the log", out, password)
			mustNotContain(t, "/healthz", health, password, "127.0.0.1")
		})
	}
}

// checkFaultLines checks the log of a sidecar that met one Redis fault:
// one line of the sidecar's for it, at level, with a request's path; none
// blaming the origin; and a few warnings and errors in all (corral's own,
// each once: the PING at start, the breaker opening, a right denied...),
// not one per request.
func checkFaultLines(t *testing.T, log, level string) {
	t.Helper()
	var noisy, ours []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			noisy = append(noisy, line)
		}
		if strings.Contains(line, `msg="corral: Redis fault, not the origin's: `) {
			ours = append(ours, line)
		}
		if strings.Contains(line, "the origin failed") {
			t.Errorf("a line blames the origin: %s", line)
		}
	}
	if len(ours) != 1 || !strings.Contains(ours[0], "level="+level) || !strings.Contains(ours[0], " path=/") {
		t.Errorf("the sidecar's lines for the fault: %q; want one, at %s, with the path", ours, level)
	}
	if len(noisy) > 6 {
		t.Errorf("%d warnings and errors; want a few, none per request:\n%s", len(noisy), strings.Join(noisy, "\n"))
	}
	t.Logf("warnings and errors:\n%s", strings.Join(noisy, "\n"))
}
