package corralhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
)

func TestMissThenHit(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, fixed("max-age=60", "hello"))
	h := newHandler(t, srv, o, nil)

	expect(t, get(t, h, "/a?x=1"), corralhttp.Miss, 200, "hello")
	w := get(t, h, "/a?x=1")
	expect(t, w, corralhttp.Hit, 200, "hello")
	if w.Header().Get("Age") == "" || w.Header().Get("Cache-Control") != "max-age=60" {
		t.Errorf("a hit's headers: %v", w.Header())
	}
	head := do(t, h, http.MethodHead, "/a?x=1")
	expect(t, head, corralhttp.Hit, 200, "")
	if head.Header().Get("Content-Length") != "5" {
		t.Errorf("HEAD Content-Length = %q, want 5", head.Header().Get("Content-Length"))
	}
	expect(t, get(t, h, "/a?x=2"), corralhttp.Miss, 200, "hello") // the query is in the key
	if n := o.requests.Load(); n != 2 {
		t.Errorf("origin requests = %d, want 2", n)
	}
}

// TestCoalesced: 1,000 concurrent requests for one URL, over two Handlers
// (two Caches, as two processes would have) sharing a Redis, reach the
// origin once.
func TestCoalesced(t *testing.T) {
	srv := redistest.Start(t)
	release := make(chan struct{})
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "body")
	})
	hs := []*corralhttp.Handler{newHandler(t, srv, o, nil), newHandler(t, srv, o, nil)}
	var misses, others atomic.Int64
	go func() {
		eventually(t, "the first origin request", func() bool { return o.requests.Load() > 0 })
		close(release)
	}()
	parallel(1000, func(i int) {
		w := get(t, hs[i%2], "/hot")
		if w.Code != 200 || w.Body.String() != "body" {
			t.Errorf("request %d: %d %q", i, w.Code, w.Body.String())
		}
		switch w.Header().Get("X-Cache") {
		case corralhttp.Miss:
			misses.Add(1)
		case corralhttp.Coalesced, corralhttp.Hit:
			others.Add(1)
		default:
			t.Errorf("request %d: X-Cache %q", i, w.Header().Get("X-Cache"))
		}
	})
	if n := o.requests.Load(); n != 1 {
		t.Errorf("origin requests = %d, want 1", n)
	}
	if misses.Load() != 1 || others.Load() != 999 {
		t.Errorf("MISS %d, COALESCED or HIT %d; want 1 and 999", misses.Load(), others.Load())
	}
}

// TestStaleWhileRevalidate: past max-age, inside stale-while-revalidate,
// requests get the stale response at once and one request revalidates.
func TestStaleWhileRevalidate(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n == 1 {
			w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=60")
		} else {
			w.Header().Set("Cache-Control", "max-age=60")
		}
		fmt.Fprintf(w, "v%d", n)
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/swr"), corralhttp.Miss, 200, "v1")
	eventually(t, "a stale answer", func() bool {
		w := get(t, h, "/swr")
		if w.Body.String() != "v1" {
			t.Fatalf("body %q before the stale answer", w.Body.String())
		}
		return w.Header().Get("X-Cache") == corralhttp.Stale
	})
	parallel(50, func(int) {
		w := get(t, h, "/swr")
		if b := w.Body.String(); w.Code != 200 || (b != "v1" && b != "v2") {
			t.Errorf("during revalidation: %d %q", w.Code, b)
		}
	})
	eventually(t, "the revalidated response", func() bool { return get(t, h, "/swr").Body.String() == "v2" })
	expect(t, get(t, h, "/swr"), corralhttp.Hit, 200, "v2")
	if n := o.requests.Load(); n != 2 {
		t.Errorf("origin requests = %d, want 2 (one revalidation)", n)
	}
}

// TestStaleIfError: past max-age, an origin failing (500, then down) gets
// the stale response served, not an error.
func TestStaleIfError(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if n > 1 {
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Cache-Control", "max-age=1, stale-if-error=60")
		io.WriteString(w, "good")
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/sie"), corralhttp.Miss, 200, "good")
	eventually(t, "a stale answer", func() bool { return get(t, h, "/sie").Header().Get("X-Cache") == corralhttp.Stale })
	// Each stale answer starts a revalidation unless one is under way; on a
	// starved machine the first may end without reaching the origin (its
	// lease or Redis too slow), so the requests go on until one does.
	eventually(t, "a failed revalidation", func() bool {
		if o.requests.Load() >= 2 {
			return true
		}
		expect(t, get(t, h, "/sie"), corralhttp.Stale, 200, "good")
		return false
	})
	expect(t, get(t, h, "/sie"), corralhttp.Stale, 200, "good")
	o.Close() // the origin goes down
	for range 5 {
		expect(t, get(t, h, "/sie"), corralhttp.Stale, 200, "good")
	}
}

// TestRevalidation: an expired response with an ETag is revalidated with
// If-None-Match; the origin's 304 refreshes it without a body.
func TestRevalidation(t *testing.T) {
	srv := redistest.Start(t)
	var conditional atomic.Int64
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=1")
		if r.Header.Get("If-None-Match") == `"v1"` {
			conditional.Add(1)
			w.Header().Set("Cache-Control", "max-age=60")
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "body")
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/etag"), corralhttp.Miss, 200, "body")
	// The origin's 304 arrives before the refreshed response is stored:
	// until it is, a request may still be answered with the expired one.
	eventually(t, "a revalidation, stored", func() bool {
		w := get(t, h, "/etag")
		if w.Code != 200 || w.Body.String() != "body" {
			t.Fatalf("%d %q", w.Code, w.Body.String())
		}
		return conditional.Load() == 1 && w.Header().Get("Cache-Control") == "max-age=60"
	})
	w := get(t, h, "/etag")
	expect(t, w, corralhttp.Hit, 200, "body")
	if cc := w.Header().Get("Cache-Control"); cc != "max-age=60" {
		t.Errorf("Cache-Control after the 304 = %q, want the 304's max-age=60", cc)
	}
	if n := o.requests.Load(); n != 2 {
		t.Errorf("origin requests = %d, want 2", n)
	}
	// A client's own If-None-Match is answered from the cache.
	w = get(t, h, "/etag", `If-None-Match: "v1"`)
	if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Errorf("conditional client request: %d %q", w.Code, w.Body.String())
	}
}

// TestNoCache: a no-cache response is revalidated for every load, and a
// 304 answers it from the kept copy.
func TestNoCache(t *testing.T) {
	srv := redistest.Start(t)
	var full atomic.Int64
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Last-Modified", "Mon, 30 Nov 2026 10:00:00 GMT")
		if r.Header.Get("If-Modified-Since") != "" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		full.Add(1)
		io.WriteString(w, "page")
	})
	h := newHandler(t, srv, o, nil)
	for range 3 {
		expect(t, get(t, h, "/nc"), corralhttp.Miss, 200, "page")
	}
	if o.requests.Load() != 3 || full.Load() != 1 {
		t.Errorf("origin requests %d (want 3), full bodies %d (want 1)", o.requests.Load(), full.Load())
	}
}

// TestNotShared: responses that may not be stored by a shared cache go to
// their own request only; the requests that waited for them ask the
// origin themselves, and for PassTTL the URL passes.
func TestNotShared(t *testing.T) {
	for _, tc := range []struct{ name, header, value string }{
		{"private", "Cache-Control", "private, max-age=60"},
		{"no-store", "Cache-Control", "no-store"},
		{"set-cookie", "Set-Cookie", "session=secret"},
		{"vary-star", "Vary", "*"},
		{"no-freshness", "X-None", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			release := make(chan struct{})
			o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				if n == 1 {
					<-release
				}
				w.Header().Set(tc.header, tc.value)
				if tc.header != "Cache-Control" {
					w.Header().Set("Cache-Control", "max-age=60")
				}
				if tc.name == "no-freshness" {
					w.Header().Del("Cache-Control")
				}
				fmt.Fprintf(w, "for request %d", n)
			})
			h := newHandler(t, srv, o, nil)
			go func() {
				eventually(t, "the first origin request", func() bool { return o.requests.Load() > 0 })
				close(release)
			}()
			bodies := make([]string, 20)
			parallel(20, func(i int) { bodies[i] = get(t, h, "/u").Body.String() })
			seen := map[string]bool{}
			for _, b := range bodies {
				if seen[b] {
					t.Errorf("two requests got %q", b)
				}
				seen[b] = true
			}
			w := get(t, h, "/u")
			if w.Header().Get("X-Cache") != corralhttp.Pass {
				t.Errorf("X-Cache after = %q, want PASS", w.Header().Get("X-Cache"))
			}
			if n := o.requests.Load(); n != 21 {
				t.Errorf("origin requests = %d, want 21", n)
			}
		})
	}
}

// TestAuthorization: requests with Authorization have entries apart from
// the anonymous requests'; among them a response is stored and shared only
// when it says it may be (RFC 9111 section 3.5), and one that may not
// leaves no pass marker.
func TestAuthorization(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if strings.HasPrefix(r.URL.Path, "/public") {
			w.Header().Set("Cache-Control", "public, max-age=60")
		} else {
			w.Header().Set("Cache-Control", "max-age=60")
		}
		fmt.Fprintf(w, "%s for %q", r.URL.Path, r.Header.Get("Authorization"))
	})
	h := newHandler(t, srv, o, nil)

	expect(t, get(t, h, "/private", "Authorization: Bearer alice"), corralhttp.Miss, 200, `/private for "Bearer alice"`)
	expect(t, get(t, h, "/private", "Authorization: Bearer bob"), corralhttp.Miss, 200, `/private for "Bearer bob"`) // not alice's, and no marker
	expect(t, get(t, h, "/private"), corralhttp.Miss, 200, `/private for ""`)
	expect(t, get(t, h, "/private"), corralhttp.Hit, 200, `/private for ""`)
	expect(t, get(t, h, "/public", "Authorization: Bearer alice"), corralhttp.Miss, 200, `/public for "Bearer alice"`)
	expect(t, get(t, h, "/public", "Authorization: Bearer bob"), corralhttp.Hit, 200, `/public for "Bearer alice"`)

	expect(t, get(t, h, "/anon"), corralhttp.Miss, 200, `/anon for ""`)
	expect(t, get(t, h, "/anon"), corralhttp.Hit, 200, `/anon for ""`)
	expect(t, get(t, h, "/anon", "Authorization: Bearer bob"), corralhttp.Miss, 200, `/anon for "Bearer bob"`)
	expect(t, get(t, h, "/anon"), corralhttp.Hit, 200, `/anon for ""`)
}

// TestAuthorizationCannotTurnCachingOff: a request with a made-up
// Authorization, on a cold URL or on one whose entry is stale, changes
// nothing for anonymous requests: they still make one origin request in
// all, and the stale entry is refreshed without the made-up credentials.
func TestAuthorizationCannotTurnCachingOff(t *testing.T) {
	srv := redistest.Start(t)
	var withAuth atomic.Int64
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if r.Header.Get("Authorization") != "" {
			withAuth.Add(1)
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=60")
		fmt.Fprintf(w, "v%d", n)
	})
	h1, h2 := newHandler(t, srv, o, nil), newHandler(t, srv, o, nil)
	junk := 0
	sendJunk := func(h http.Handler) {
		junk++
		if w := get(t, h, "/dos", "Authorization: Bearer junk"); w.Code != http.StatusUnauthorized {
			t.Fatalf("junk credentials: %d", w.Code)
		}
	}
	sendJunk(h1)
	sendJunk(h2)
	parallel(100, func(i int) {
		w := get(t, []*corralhttp.Handler{h1, h2}[i%2], "/dos")
		if w.Code != 200 || w.Body.String() != "v3" {
			t.Errorf("anonymous request %d: %d %q (X-Cache %s)", i, w.Code, w.Body.String(), w.Header().Get("X-Cache"))
		}
	})
	if n := o.requests.Load(); n != 3 {
		t.Fatalf("origin requests = %d, want 3 (2 with junk credentials, 1 anonymous)", n)
	}
	eventually(t, "the entry going stale", func() bool {
		sendJunk(h1)
		return get(t, h1, "/dos").Header().Get("X-Cache") == corralhttp.Stale
	})
	eventually(t, "the refresh", func() bool { return get(t, h2, "/dos").Body.String() != "v3" })
	w := get(t, h2, "/dos")
	if w.Code != 200 || w.Header().Get("X-Cache") == corralhttp.Pass {
		t.Errorf("after the refresh: %d, X-Cache %s", w.Code, w.Header().Get("X-Cache"))
	}
	if anon := o.requests.Load() - withAuth.Load(); anon != 2 {
		t.Errorf("anonymous origin requests = %d, want 2 (the first load and one refresh)", anon)
	}
	if n := withAuth.Load(); n != int64(junk) {
		t.Errorf("origin requests with the junk credentials = %d, want %d, one per request that sent them", n, junk)
	}
}

// TestNoPoisoning: a header outside the forwarded list never reaches the
// origin, so it cannot change what others are served; a forwarded one is
// part of the key.
func TestNoPoisoning(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "host=%s xfh=%s accept=%s", r.Host, r.Header.Get("X-Forwarded-Host"), r.Header.Get("Accept"))
	})
	h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.ForwardHeaders = []string{"accept"} })
	originHost := strings.TrimPrefix(o.URL, "http://")

	want := fmt.Sprintf("host=%s xfh= accept=", originHost)
	expect(t, get(t, h, "/p", "X-Forwarded-Host: evil.example", "Cookie: a=b", "X-Original-URL: /admin"), corralhttp.Miss, 200, want)
	if last := o.lastHeader(); last.Get("Cookie") != "" || last.Get("X-Original-URL") != "" || last.Get("X-Forwarded-Host") != "" {
		t.Errorf("unlisted headers reached the origin: %v", last)
	}
	expect(t, get(t, h, "/p"), corralhttp.Hit, 200, want)
	r := newRequest("/p")
	r.Host = "evil.example"
	w := serve(h, r)
	expect(t, w, corralhttp.Hit, 200, want) // the client's Host is not the origin's

	expect(t, get(t, h, "/p", "Accept: text/evil"), corralhttp.Miss, 200, fmt.Sprintf("host=%s xfh= accept=text/evil", originHost))
	expect(t, get(t, h, "/p"), corralhttp.Hit, 200, want)
}

// TestBadInput: each gets a clear answer, and nothing partial is stored.
func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Cache-Control", "max-age=60")
			w.Write([]byte(strings.Repeat("x", 2000)))
		case "/big-chunked":
			w.Header().Set("Cache-Control", "max-age=60")
			for range 20 {
				w.Write([]byte(strings.Repeat("y", 100)))
				w.(http.Flusher).Flush()
			}
		case "/hang":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		case "/cut":
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "partial")
			panic(http.ErrAbortHandler)
		case "/badcc":
			w.Header().Set("Cache-Control", `max-age="60`)
			io.WriteString(w, "odd")
		default:
			w.Header().Set("Cache-Control", "max-age=60")
			io.WriteString(w, "ok")
		}
	})
	h := newHandler(t, srv, o, func(o *corralhttp.Options) {
		o.MaxBodyBytes = 1000
		o.OriginTimeout = 300 * time.Millisecond
	})

	w := get(t, h, "/"+strings.Repeat("a", 9000))
	if w.Code != http.StatusRequestURITooLong {
		t.Errorf("long URL: %d", w.Code)
	}
	r := newRequest("/body")
	r.Body = io.NopCloser(strings.NewReader("payload"))
	r.ContentLength = 7
	if w := serve(h, r); w.Code != http.StatusBadRequest {
		t.Errorf("GET with a body: %d", w.Code)
	}
	for _, path := range []string{"/big", "/big-chunked"} {
		before := o.requests.Load()
		want := strings.Repeat(map[string]string{"/big": "x", "/big-chunked": "y"}[path], 2000)
		for range 2 {
			expect(t, get(t, h, path), corralhttp.Pass, 200, want)
		}
		if n := o.requests.Load() - before; n != 2 {
			t.Errorf("%s: origin requests = %d, want 2 (one per request, streamed: none read twice)", path, n)
		}
	}
	if w := get(t, h, "/hang"); w.Code != http.StatusGatewayTimeout {
		t.Errorf("an origin that never answers: %d %q", w.Code, w.Body.String())
	}
	for range 2 {
		w := get(t, h, "/cut")
		if w.Code != http.StatusBadGateway || strings.Contains(w.Body.String(), "127.0.0.1") {
			t.Errorf("an origin that closes mid-body: %d %q", w.Code, w.Body.String())
		}
	}
	expect(t, get(t, h, "/badcc"), corralhttp.Miss, 200, "odd")
	expect(t, get(t, h, "/badcc"), corralhttp.Pass, 200, "odd")
	before := o.requests.Load()
	expect(t, get(t, h, "/fine"), corralhttp.Miss, 200, "ok")
	expect(t, get(t, h, "/fine"), corralhttp.Hit, 200, "ok")
	if n := o.requests.Load() - before; n != 1 {
		t.Errorf("origin requests for /fine = %d, want 1", n)
	}
}

// TestOtherMethods: POST passes to the origin with its body, never stored.
func TestOtherMethods(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "%s %s %s", r.Method, b, r.Header.Get("Content-Type"))
	})
	h := newHandler(t, srv, o, nil)
	for range 2 {
		r := newRequest("/post")
		r.Method = http.MethodPost
		r.Body = io.NopCloser(strings.NewReader("data"))
		r.ContentLength = 4
		r.Header.Set("Content-Type", "text/plain")
		expect(t, serve(h, r), corralhttp.Pass, 200, "POST data text/plain")
	}
}

// TestRedisDown: with Redis gone the Handler still serves, one origin
// request per URL in this process at a time (fail-open).
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	release := make(chan struct{})
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "served")
	})
	h := newHandler(t, srv, o, nil)
	srv.Stop()
	go func() {
		eventually(t, "the first origin request", func() bool { return o.requests.Load() > 0 })
		close(release)
	}()
	parallel(100, func(int) {
		if w := get(t, h, "/down"); w.Code != 200 || w.Body.String() != "served" {
			t.Errorf("%d %q", w.Code, w.Body.String())
		}
	})
	if n := o.requests.Load(); n != 1 {
		t.Errorf("origin requests = %d, want 1", n)
	}
}

// TestMetrics: the request and origin counters, by X-Cache value and
// status code.
func TestMetrics(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, fixed("max-age=60", "m"))
	reg := prometheus.NewPedanticRegistry()
	h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.Registerer = reg })
	get(t, h, "/m")
	get(t, h, "/m")
	get(t, h, "/"+strings.Repeat("a", 9000))
	want := `
# HELP corral_http_origin_requests_total Requests sent to the origin, by the status code of its answer (error: no answer, or a body cut short).
# TYPE corral_http_origin_requests_total counter
corral_http_origin_requests_total{code="200"} 1
# HELP corral_http_requests_total Requests, by how they were answered: the X-Cache value, ERROR for an answer the sidecar made (400, 414, 502, 503, 504), GONE when the client left first.
# TYPE corral_http_requests_total counter
corral_http_requests_total{cache="ERROR"} 1
corral_http_requests_total{cache="HIT"} 1
corral_http_requests_total{cache="MISS"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "corral_http_requests_total", "corral_http_origin_requests_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "corral_http_request_duration_seconds"); err != nil || n != 3 {
		t.Errorf("duration series = %d, %v; want 3", n, err)
	}
	// A second Handler on the same registry shares the metrics.
	newHandler(t, srv, o, func(o *corralhttp.Options) { o.Registerer = reg })
}

// TestUnsafeMethodInvalidates: a POST the origin accepts removes the
// stored response of its URL (RFC 9111 section 4.4); a PUT it refuses
// does not.
func TestUnsafeMethodInvalidates(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if r.Method == http.MethodPut {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "%s %d", r.Method, n)
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/doc"), corralhttp.Miss, 200, "GET 1")
	expect(t, do(t, h, http.MethodPut, "/doc"), corralhttp.Pass, 403, "no\n")
	expect(t, get(t, h, "/doc"), corralhttp.Hit, 200, "GET 1")
	expect(t, do(t, h, http.MethodPost, "/doc"), corralhttp.Pass, 200, "POST 3")
	expect(t, get(t, h, "/doc"), corralhttp.Miss, 200, "GET 4")
}

// TestNearCache: with the near cache on, hits are served from memory
// (Stats.NearHits) and still end at the response's own freshness.
func TestNearCache(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "max-age=1")
		fmt.Fprintf(w, "v%d", n)
	})
	h := newHandler(t, srv, o, func(o *corralhttp.Options) {
		o.Cache.NearCache = corral.NearCacheOptions{Size: 100, TTL: time.Minute}
	})
	expect(t, get(t, h, "/near"), corralhttp.Miss, 200, "v1")
	eventually(t, "a near hit", func() bool {
		expect(t, get(t, h, "/near"), corralhttp.Hit, 200, "v1")
		return h.Stats().NearHits > 0
	})
	eventually(t, "the response's expiry", func() bool {
		w := get(t, h, "/near")
		if age, _ := strconv.Atoi(w.Header().Get("Age")); w.Header().Get("X-Cache") == corralhttp.Hit && age > 1 {
			t.Fatalf("a hit %s s old, past max-age=1", w.Header().Get("Age"))
		}
		return w.Body.String() == "v2"
	})
}

// TestHeadAndDefaultTTL: a HEAD miss is loaded with GET and stored for
// the GETs after it; a response without freshness is stored for
// DefaultTTL.
func TestHeadAndDefaultTTL(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		fmt.Fprintf(w, "%s %d", r.Method, n)
	})
	h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.DefaultTTL = time.Minute })
	w := do(t, h, http.MethodHead, "/h")
	expect(t, w, corralhttp.Miss, 200, "")
	if w.Header().Get("Content-Length") != "5" {
		t.Errorf("HEAD Content-Length = %q, want 5", w.Header().Get("Content-Length"))
	}
	expect(t, get(t, h, "/h"), corralhttp.Hit, 200, "GET 1")
}

// TestOptions: bad Options are refused with ErrInvalidOptions.
func TestOptions(t *testing.T) {
	srv := redistest.Start(t)
	for _, raw := range []string{"", "ftp://host", "http://", "http://host/?q=1", "http://host/#f"} {
		var u *url.URL
		if raw != "" {
			u, _ = url.Parse(raw)
		}
		_, err := corralhttp.New(srv.Client(), corralhttp.Options{Origin: u})
		if !errors.Is(err, corralhttp.ErrInvalidOptions) {
			t.Errorf("Origin %q: err %v, want ErrInvalidOptions", raw, err)
		}
	}
	u, _ := url.Parse("http://user:secret@host")
	_, err := corralhttp.New(srv.Client(), corralhttp.Options{Origin: u, MaxBodyBytes: -1})
	if !errors.Is(err, corralhttp.ErrInvalidOptions) || strings.Contains(err.Error(), "secret") {
		t.Errorf("negative size: %v", err)
	}
	_, err = corralhttp.New(srv.Client(), corralhttp.Options{Origin: &url.URL{Scheme: "ftp", User: url.UserPassword("u", "secret"), Host: "h"}})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("an error shows the origin's password: %v", err)
	}
}

// Ready is the Cache's: nil once the start-up round trips are made, and
// ErrClosed once the Handler is closed.
func TestReady(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	h := newHandler(t, srv, startOrigin(t, fixed("max-age=60", "x")), nil)
	ctx := context.Background()
	if err := h.Ready(ctx); err != nil {
		t.Fatalf("Ready = %v; want nil", err)
	}
	h.Close()
	if err := h.Ready(ctx); !errors.Is(err, corral.ErrClosed) {
		t.Fatalf("Ready after Close = %v; want ErrClosed", err)
	}
}
