package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
)

// `corral serve` as proxy users expect it, run as the built binary: the
// access log, and the headers of RFC 9211 (Cache-Status) and RFC 9110
// (Via, 1xx, ranges, preconditions).

// exchange is one request a test sends a sidecar, and what it expects.
type exchange struct {
	method, path string
	headers      []string // "Name: value"
	status       int
	xcache       string
}

// send sends x to the sidecar at base, and returns the response, its body
// read, and the 1xx status codes it got before it.
func send(t *testing.T, base string, x exchange) (*http.Response, string, []int) {
	t.Helper()
	var mu sync.Mutex
	var early []int
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			early = append(early, code)
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, x.method, base+x.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range x.headers {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Add(k, v)
	}
	tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: waitBound}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", x.method, x.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", x.method, x.path, err)
	}
	if resp.StatusCode != x.status || resp.Header.Get("X-Cache") != x.xcache {
		t.Errorf("%s %s %q: %d, X-Cache %q; want %d, %q", x.method, x.path, x.headers, resp.StatusCode, resp.Header.Get("X-Cache"), x.status, x.xcache)
	}
	mu.Lock()
	defer mu.Unlock()
	return resp, string(body), early
}

// accessLines returns the access log's lines in a sidecar's output.
func accessLines(out string) []string {
	var lines []string
	for line := range strings.Lines(out) {
		if strings.Contains(line, "corral: request") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}

// --access-log text and json write one line per request on stdout, with
// its method, path, status, X-Cache value, bytes and duration, and never
// a credential: the Authorization and Cookie values and the query's token
// appear nowhere in the sidecar's output.
func TestServeAccessLog(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	org := startOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		io.WriteString(w, "hello")
	})
	secrets := []string{"Authorization: Bearer secret-in-authorization", "Cookie: id=secret-in-cookie"}
	steps := []exchange{
		{"GET", "/a?token=secret-in-query", secrets, 200, "MISS"},
		{"GET", "/a?token=secret-in-query", secrets, 200, "HIT"},
		{"HEAD", "/a?token=secret-in-query", secrets, 200, "HIT"},
		{"POST", "/a?token=secret-in-query", secrets, 200, "PASS"},
	}
	text := regexp.MustCompile(`^time=\S+ level=INFO msg="corral: request" method=(\S+) path=(\S+) status=(\d+) cache=(\S+) bytes=(\d+) duration=\S+ remote=127\.0\.0\.1:\d+$`)
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			s := startSidecar(t, nil, "--origin", org.URL, "--redis", srv.URL(), "--prefix", "accesslog-"+format, "--access-log", format)
			for _, x := range steps {
				send(t, s.URL, x)
			}
			waitFor(t, waitBound, "a line per request", func() bool { return len(accessLines(s.out.String())) >= len(steps) })
			lines := accessLines(s.out.String())
			if len(lines) != len(steps) {
				t.Fatalf("%d access log lines for %d requests:\n%s", len(lines), len(steps), strings.Join(lines, "\n"))
			}
			for i, line := range lines {
				var got [5]string
				if format == "text" {
					m := text.FindStringSubmatch(line)
					if m == nil {
						t.Fatalf("line %d does not read as %v: %s", i, text, line)
					}
					copy(got[:], m[1:])
				} else {
					var rec struct {
						Method, Path, Cache string
						Status, Bytes       int
						Duration            int64
					}
					if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Duration <= 0 {
						t.Fatalf("line %d (%v): %s", i, err, line)
					}
					got = [5]string{rec.Method, rec.Path, strconv.Itoa(rec.Status), rec.Cache, strconv.Itoa(rec.Bytes)}
				}
				bytes := map[string]string{"HEAD": "0"}[steps[i].method]
				if bytes == "" {
					bytes = "5"
				}
				if want := [5]string{steps[i].method, "/a", "200", steps[i].xcache, bytes}; got != want {
					t.Errorf("line %d: %q, want %q: %s", i, got, want, line)
				}
			}
			mustNotContain(t, "the sidecar's output", s.out.String(), "secret-in-")
		})
	}
}

// The sidecar answers with the headers of RFC 9211 and RFC 9110, naming
// itself by --cache-name: Cache-Status after the origin's members, Via on
// responses and on requests to the origin, a 103 forwarded, a range and a
// precondition answered from the cache, heuristic freshness from
// Last-Modified; no access log unless asked for.
func TestServeCacheHeaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	modified := time.Now().Add(-10 * time.Hour).UTC().Format(http.TimeFormat)
	var mu sync.Mutex
	var originVia []string // guarded by mu
	org := startOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		originVia = append(originVia, r.Header.Get("Via"))
		mu.Unlock()
		if r.URL.Path == "/hints" {
			w.Header().Set("Link", "</app.js>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		w.Header().Set("Last-Modified", modified) // no Cache-Control: heuristic freshness
		w.Header().Set("Cache-Status", "origin-cache; fwd=uri-miss")
		io.WriteString(w, "0123456789")
	})
	s := startSidecar(t, nil, "--origin", org.URL, "--redis", srv.URL(), "--cache-name", "edge-1")
	for _, tc := range []struct {
		x           exchange
		cacheStatus string
		body        string
		early       int
	}{
		{exchange{"GET", "/h", nil, 200, "MISS"}, "origin-cache; fwd=uri-miss, edge-1; fwd=uri-miss; stored", "0123456789", 0},
		{exchange{"GET", "/h", nil, 200, "HIT"}, "origin-cache; fwd=uri-miss, edge-1; hit", "0123456789", 0},
		{exchange{"GET", "/h", []string{"Range: bytes=2-4"}, 206, "HIT"}, "origin-cache; fwd=uri-miss, edge-1; hit", "234", 0},
		{exchange{"GET", "/h", []string{"If-Modified-Since: " + modified}, 304, "HIT"}, "origin-cache; fwd=uri-miss, edge-1; hit", "", 0},
		{exchange{"POST", "/h", nil, 200, "PASS"}, "origin-cache; fwd=uri-miss, edge-1; fwd=method", "0123456789", 0},
		{exchange{"GET", "/hints", nil, 200, "MISS"}, "origin-cache; fwd=uri-miss, edge-1; fwd=uri-miss; stored", "0123456789", 1},
	} {
		resp, body, early := send(t, s.URL, tc.x)
		if got := resp.Header.Get("Cache-Status"); got != tc.cacheStatus {
			t.Errorf("%s %s %q: Cache-Status %q, want %q", tc.x.method, tc.x.path, tc.x.headers, got, tc.cacheStatus)
		}
		if got := resp.Header.Get("Via"); got != "1.1 edge-1" {
			t.Errorf("%s %s: Via %q, want 1.1 edge-1", tc.x.method, tc.x.path, got)
		}
		if body != tc.body || len(early) != tc.early || tc.early > 0 && early[0] != http.StatusEarlyHints {
			t.Errorf("%s %s %q: body %q, 1xx %v; want %q, %d 103", tc.x.method, tc.x.path, tc.x.headers, body, early, tc.body, tc.early)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"1.1 edge-1", "1.1 edge-1", "1.1 edge-1"}; strings.Join(originVia, "|") != strings.Join(want, "|") {
		t.Errorf("the origin got Via %q, want %q (a load, a pass, a load)", originVia, want)
	}
	if lines := accessLines(s.out.String()); len(lines) > 0 {
		t.Errorf("an access log without --access-log:\n%s", strings.Join(lines, "\n"))
	}
}
