package corralhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
)

// RFC 9110 (HTTP Semantics), section by section, with a real origin and a
// real redis-server: what a cache answers from a stored response itself
// (ranges, section 14; preconditions, section 13), and what a proxy must
// forward (1xx, section 15.2; Via, section 7.6.3).

// rangeBody is the stored body the range tests ask parts of: 100,000
// bytes, each the last digit of its offset.
var rangeBody = strings.Repeat("0123456789", 10_000)

// TestRangeRequests: RFC 9110 section 14 and 13.1.5. A GET with one
// satisfiable byte range of a stored 200 is answered 206 from the cache,
// with Content-Range; with no satisfiable range, 416 and Content-Range:
// bytes */length; with several ranges, a Range to ignore, or an If-Range
// that does not match, the whole response.
func TestRangeRequests(t *testing.T) {
	srv := redistest.Start(t)
	modified := time.Now().Add(-2 * time.Minute).UTC().Format(http.TimeFormat)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("ETag", `"r"`)
		w.Header().Set("Last-Modified", modified)
		io.WriteString(w, rangeBody)
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/r"), corralhttp.Miss, 200, rangeBody)
	const whole = -2 // the whole body; -1 as last: none
	for _, tc := range []struct {
		name         string
		headers      []string
		status       int
		first, last  int    // the part of rangeBody served, or whole
		contentRange string // "" for none
	}{
		{"14.1.2 first-last", []string{"Range: bytes=2-5"}, 206, 2, 5, "bytes 2-5/100000"},
		{"14.1.2 first only", []string{"Range: bytes=99990-"}, 206, 99990, 99999, "bytes 99990-99999/100000"},
		{"14.1.2 last past the end", []string{"Range: bytes=99998-200000"}, 206, 99998, 99999, "bytes 99998-99999/100000"},
		{"14.1.2 suffix", []string{"Range: bytes=-3"}, 206, 99997, 99999, "bytes 99997-99999/100000"},
		{"14.1.2 suffix past the start", []string{"Range: bytes=-200000"}, 206, 0, 99999, "bytes 0-99999/100000"},
		{"14.1 unit case-insensitive", []string{"Range: BYTES=0-0"}, 206, 0, 0, "bytes 0-0/100000"},
		{"5.6.1 empty list members", []string{"Range: bytes=, 3-4 ,"}, 206, 3, 4, "bytes 3-4/100000"},
		{"14.1.1 unsatisfiable", []string{"Range: bytes=100000-"}, 416, 0, -1, "bytes */100000"},
		{"14.1.1 suffix of 0", []string{"Range: bytes=-0"}, 416, 0, -1, "bytes */100000"},
		{"14.1.1 several, none satisfiable", []string{"Range: bytes=100000-, 200000-300000"}, 416, 0, -1, "bytes */100000"},
		{"14.2 several ranges: the whole", []string{"Range: bytes=0-1, 5-6"}, 200, 0, whole, ""},
		{"14.2 several, one satisfiable: the whole", []string{"Range: bytes=0-1, 200000-"}, 200, 0, whole, ""},
		{"14.1.1 last before first: ignored", []string{"Range: bytes=5-2"}, 200, 0, whole, ""},
		{"14.2 malformed: ignored", []string{"Range: bytes=a-b"}, 200, 0, whole, ""},
		{"14.2 another unit: ignored", []string{"Range: items=0-1"}, 200, 0, whole, ""},
		{"14.2 two Range lines: ignored", []string{"Range: bytes=0-1", "Range: bytes=2-3"}, 200, 0, whole, ""},
		{"13.1.5 If-Range, the ETag", []string{"Range: bytes=2-5", `If-Range: "r"`}, 206, 2, 5, "bytes 2-5/100000"},
		{"13.1.5 If-Range, another ETag", []string{"Range: bytes=2-5", `If-Range: "q"`}, 200, 0, whole, ""},
		{"13.1.5 If-Range, weak", []string{"Range: bytes=2-5", `If-Range: W/"r"`}, 200, 0, whole, ""},
		{"13.1.5 If-Range, the Last-Modified", []string{"Range: bytes=2-5", "If-Range: " + modified}, 206, 2, 5, "bytes 2-5/100000"},
		{"13.1.5 If-Range, another date", []string{"Range: bytes=2-5", "If-Range: Mon, 02 Jan 2006 15:04:05 GMT"}, 200, 0, whole, ""},
		{"13.1.5 If-Range without Range", []string{`If-Range: "q"`}, 200, 0, whole, ""},
		{"13.2.2 If-None-Match before Range", []string{"Range: bytes=2-5", `If-None-Match: "r"`}, 304, 0, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := get(t, h, "/r", tc.headers...)
			want := ""
			switch {
			case tc.last == whole:
				want = rangeBody
			case tc.last >= 0:
				want = rangeBody[tc.first : tc.last+1]
			}
			if w.Code != tc.status || w.Body.String() != want || w.Header().Get("X-Cache") != corralhttp.Hit {
				t.Errorf("%d, X-Cache %s, %d bytes %.20q...; want %d, HIT, %d bytes %.20q...",
					w.Code, w.Header().Get("X-Cache"), w.Body.Len(), w.Body.String(), tc.status, len(want), want)
			}
			if got := w.Header().Get("Content-Range"); got != tc.contentRange {
				t.Errorf("Content-Range %q, want %q", got, tc.contentRange)
			}
			if got := w.Header().Get("Accept-Ranges"); got != "bytes" {
				t.Errorf("Accept-Ranges %q, want bytes", got)
			}
			if got := cacheStatusOf(t, w); got != "corral; hit" {
				t.Errorf("Cache-Status %q", got)
			}
		})
	}
	t.Run("14.2 HEAD: Range ignored", func(t *testing.T) {
		w := do(t, h, http.MethodHead, "/r", "Range: bytes=2-5")
		expect(t, w, corralhttp.Hit, 200, "")
		if w.Header().Get("Content-Length") != "100000" {
			t.Errorf("Content-Length %q", w.Header().Get("Content-Length"))
		}
	})
	if n := o.requests.Load(); n != 1 {
		t.Errorf("origin requests %d, want 1: every range from the cache", n)
	}
	t.Run("8.8.2.2 If-Range, a weak Last-Modified", func(t *testing.T) { testWeakLastModified(t, srv) })
	t.Run("14.3 passed: the origin answers the Range", func(t *testing.T) { testRangePassed(t, srv) })
}

// testWeakLastModified: a Last-Modified less than 60 seconds before the
// response's Date is a weak validator, which If-Range does not match.
func testWeakLastModified(t *testing.T, srv *redistest.Server) {
	now := time.Now().UTC()
	date, modified := now.Format(http.TimeFormat), now.Add(-10*time.Second).Format(http.TimeFormat)
	o := startOrigin(t, counted("Cache-Control", "max-age=600", "Date", date, "Last-Modified", modified))
	h := newHandler(t, srv, o, nil)
	get(t, h, "/w")
	expect(t, get(t, h, "/w", "Range: bytes=0-0", "If-Range: "+modified), corralhttp.Hit, 200, "#1")
	expect(t, get(t, h, "/w", "Range: bytes=0-0"), corralhttp.Hit, 206, "#")
}

// testRangePassed: a request passed to the origin is sent its Range and
// If-Range, so the Accept-Ranges it is answered with holds.
func testRangePassed(t *testing.T, srv *redistest.Server) {
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "private")
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(rangeBody))
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/p"), corralhttp.Miss, 200, rangeBody)
	w := get(t, h, "/p", "Range: bytes=10-12")
	expect(t, w, corralhttp.Pass, 206, "012")
	if w.Header().Get("Accept-Ranges") != "bytes" || w.Header().Get("Content-Range") != "bytes 10-12/100000" {
		t.Errorf("Accept-Ranges %q, Content-Range %q", w.Header().Get("Accept-Ranges"), w.Header().Get("Content-Range"))
	}
}

// TestIfModifiedSince: RFC 9110 sections 13.1.3 and 13.2.2, RFC 9111
// section 4.3.2. A client's If-Modified-Since, one valid HTTP-date (read
// strictly), no earlier than the stored response's Last-Modified (without
// one, its Date), is answered 304 from the cache, unless the request has
// If-None-Match, which is evaluated instead.
func TestIfModifiedSince(t *testing.T) {
	srv := redistest.Start(t)
	modified := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	imf := func(t time.Time) string { return t.Format(http.TimeFormat) }
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "max-age=600")
		switch r.URL.Path {
		case "/date": // no Last-Modified: its Date counts
			w.Header().Set("Date", imf(modified))
		case "/404":
			w.Header().Set("Last-Modified", imf(modified))
			w.WriteHeader(http.StatusNotFound)
		default:
			w.Header().Set("Last-Modified", imf(modified))
			w.Header().Set("ETag", `"m"`)
		}
		fmt.Fprintf(w, "#%d", n)
	})
	h := newHandler(t, srv, o, nil)
	for _, path := range []string{"/m", "/date", "/404"} {
		get(t, h, path)
	}
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		headers []string
		status  int
	}{
		{"13.1.3 the same date", "GET", "/m", []string{"If-Modified-Since: " + imf(modified)}, 304},
		{"13.1.3 a later date", "GET", "/m", []string{"If-Modified-Since: " + imf(modified.Add(time.Hour))}, 304},
		{"13.1.3 an earlier date", "GET", "/m", []string{"If-Modified-Since: " + imf(modified.Add(-time.Second))}, 200},
		{"13.1.3 HEAD", "HEAD", "/m", []string{"If-Modified-Since: " + imf(modified)}, 304},
		{"5.6.7 rfc850-date", "GET", "/m", []string{"If-Modified-Since: Monday, 02-Nov-26 10:00:00 GMT"}, 304},
		{"5.6.7 asctime-date", "GET", "/m", []string{"If-Modified-Since: Mon Nov  2 10:00:00 2026"}, 304},
		{"13.1.3 not a date: ignored", "GET", "/m", []string{"If-Modified-Since: yesterday"}, 200},
		{"5.6.7 a one-digit hour: not a date", "GET", "/m", []string{"If-Modified-Since: Mon, 02 Nov 2026 9:00:00 GMT"}, 200},
		{"13.1.3 two dates: ignored", "GET", "/m", []string{"If-Modified-Since: " + imf(modified), "If-Modified-Since: " + imf(modified)}, 200},
		{"13.1.3 If-None-Match that differs wins", "GET", "/m", []string{`If-None-Match: "x"`, "If-Modified-Since: " + imf(modified)}, 200},
		{"13.1.3 If-None-Match that matches wins", "GET", "/m", []string{`If-None-Match: "m"`, "If-Modified-Since: " + imf(modified.Add(-time.Hour))}, 304},
		{"RFC 9111 4.3.2 no Last-Modified: the Date", "GET", "/date", []string{"If-Modified-Since: " + imf(modified)}, 304},
		{"RFC 9111 4.3.2 no Last-Modified, an earlier date", "GET", "/date", []string{"If-Modified-Since: " + imf(modified.Add(-time.Second))}, 200},
		{"13.2.1 not a 2xx: no 304", "GET", "/404", []string{"If-Modified-Since: " + imf(modified)}, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := do(t, h, tc.method, tc.path, tc.headers...)
			want := "#" + map[string]string{"/m": "1", "/date": "2", "/404": "3"}[tc.path]
			if tc.status == 304 || tc.method == "HEAD" {
				want = ""
			}
			expect(t, w, corralhttp.Hit, tc.status, want)
		})
	}
	if n := o.requests.Load(); n != 3 {
		t.Errorf("origin requests %d, want 3: every precondition from the cache", n)
	}
}

// early records the 1xx responses a client gets.
type early struct {
	mu    sync.Mutex
	codes []int
	links []string
}

// fetchTraced GETs url (with method), recording its 1xx responses in e.
func fetchTraced(t *testing.T, method, url string, e *early) *http.Response {
	t.Helper()
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.codes = append(e.codes, code)
			e.links = append(e.links, h.Get("Link"))
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestInformational: RFC 9110 section 15.2. A 103 Early Hints from the
// origin reaches the client whose request asked the origin (its own load,
// or passed), before the final response, which does not carry its
// fields; a hit gets none, there being no origin exchange.
func TestInformational(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name      string
		accessLog bool
	}{{"15.2", false}, {"15.2 with the access log", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				w.Header().Set("Link", "</style.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Del("Link")
				w.Header().Set("Cache-Control", map[string]string{"/private": "private", "/page": "max-age=60"}[r.URL.Path])
				io.WriteString(w, "page")
			})
			logs := &testkit.Buffer{}
			h := newHandler(t, srv, o, func(o *corralhttp.Options) {
				if tc.accessLog {
					o.AccessLog = newJSONLog(logs)
				}
			})
			front := httptest.NewServer(h)
			t.Cleanup(front.Close)
			for _, step := range []struct {
				method, path, xcache string
				hints                int
			}{
				{"GET", "/page", corralhttp.Miss, 1}, {"GET", "/page", corralhttp.Hit, 0},
				{"GET", "/private", corralhttp.Miss, 1}, {"GET", "/private", corralhttp.Pass, 1}, {"POST", "/page", corralhttp.Pass, 1},
			} {
				e := new(early)
				resp := fetchTraced(t, step.method, front.URL+step.path, e)
				if resp.Header.Get("X-Cache") != step.xcache || resp.StatusCode != 200 || resp.Header.Get("Link") != "" {
					t.Errorf("%s %s: %d, X-Cache %s, Link %q", step.method, step.path, resp.StatusCode, resp.Header.Get("X-Cache"), resp.Header.Get("Link"))
				}
				if len(e.codes) != step.hints || step.hints > 0 && (e.codes[0] != 103 || e.links[0] != "</style.css>; rel=preload") {
					t.Errorf("%s %s (%s): 1xx %v %q, want %d 103 with the Link", step.method, step.path, step.xcache, e.codes, e.links, step.hints)
				}
			}
			if tc.accessLog {
				if got := strings.Count(logs.String(), `"status":200`); got != 5 {
					t.Errorf("%d access log records of status 200, want 5:\n%s", got, logs)
				}
			}
		})
	}
}

// TestVia: RFC 9110 section 7.6.3. Each response served, and each request
// sent to the origin (loaded or passed), has "1.1 corral" (the client's
// protocol and Options.CacheName) appended to its Via.
func TestVia(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name        string
		originVia   string // the origin's response's Via
		forward     []string
		clientVia   string // the client's request's Via
		cacheName   string
		method      string
		wantRequest string // the Via the origin gets
		wantResp    string // the Via the client gets
	}{
		{"7.6.3 a load", "", nil, "", "", "GET", "1.1 corral", "1.1 corral"},
		{"7.6.3 appended to the origin's", "1.0 upstream", nil, "", "", "GET", "1.1 corral", "1.0 upstream, 1.1 corral"},
		{"7.6.3 the client's, when forwarded", "", []string{"Via"}, "1.1 edge", "", "GET", "1.1 edge, 1.1 corral", "1.1 corral"},
		{"7.6.3 the client's, not forwarded", "", nil, "1.1 edge", "", "GET", "1.1 corral", "1.1 corral"},
		{"7.6.3 passed", "1.0 upstream", nil, "", "", "POST", "1.1 corral", "1.0 upstream, 1.1 corral"},
		{"7.6.3 Options.CacheName", "", nil, "", "edge-7", "GET", "1.1 edge-7", "1.1 edge-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				if tc.originVia != "" {
					w.Header().Set("Via", tc.originVia)
				}
				w.Header().Set("Cache-Control", "max-age=60")
				io.WriteString(w, "ok")
			})
			h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.ForwardHeaders, o.CacheName = tc.forward, tc.cacheName })
			var headers []string
			if tc.clientVia != "" {
				headers = append(headers, "Via: "+tc.clientVia)
			}
			for i := range 2 { // a miss or pass, then a hit or pass
				w := do(t, h, tc.method, "/via", headers...)
				if got := w.Header().Get("Via"); got != tc.wantResp {
					t.Errorf("request %d: the client got Via %q, want %q", i, got, tc.wantResp)
				}
			}
			if got := strings.Join(o.lastHeader().Values("Via"), ", "); got != tc.wantRequest {
				t.Errorf("the origin got Via %q, want %q", got, tc.wantRequest)
			}
		})
	}
}
