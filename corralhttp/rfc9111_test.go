package corralhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
)

// The HTTP caching RFCs, section by section, each rule with a real origin
// (httptest) and a real redis-server: RFC 9111 (HTTP Caching), RFC 9110
// (HTTP Semantics), RFC 5861 (stale-while-revalidate, stale-if-error) and
// RFC 9213 (targeted cache control). Each "never" rule has a test of its
// own, named for it; the subtests of a test share one redis-server, each
// under a prefix of its own, and run in parallel.

// counted answers each request with header (name, value pairs; a name may
// come twice) and the body "#n", n the request's number at the origin.
func counted(header ...string) func(http.ResponseWriter, *http.Request, int64) {
	return func(w http.ResponseWriter, _ *http.Request, n int64) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Add(header[i], header[i+1])
		}
		fmt.Fprintf(w, "#%d", n)
	}
}

// reusedOrNot sends two GETs of one URL through a Handler (adjusted by
// adjust) in front of an origin answering counted(header...), and checks
// that the second is served from the cache when fresh, and otherwise asks
// the origin again.
func reusedOrNot(t *testing.T, srv *redistest.Server, adjust func(*corralhttp.Options), fresh bool, header ...string) {
	t.Helper()
	o := startOrigin(t, counted(header...))
	h := newHandler(t, srv, o, adjust)
	if w := get(t, h, "/r"); w.Code != 200 || w.Body.String() != "#1" {
		t.Fatalf("first request: %d %q", w.Code, w.Body.String())
	}
	w := get(t, h, "/r")
	switch xc := w.Header().Get("X-Cache"); {
	case fresh:
		expect(t, w, corralhttp.Hit, 200, "#1")
	case xc == corralhttp.Hit || xc == corralhttp.Stale || w.Body.String() != "#2":
		t.Errorf("served from the cache (X-Cache %s, body %q, origin requests %d); want the origin asked again", xc, w.Body.String(), o.requests.Load())
	}
}

// TestNeverServesExpiredAsFresh: RFC 9111 sections 4.2 (freshness), 5.1
// (Age), 5.2 (Cache-Control) and 5.3 (Expires), RFC 9110 section 5.6.7
// (HTTP-date). A response the RFCs say has expired, or whose freshness
// information is invalid, is never served from the cache as fresh: the
// next request asks the origin. The valid forms beside them are served
// from the cache, which shows that they are read.
func TestNeverServesExpiredAsFresh(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now().UTC()
	future := now.Add(time.Hour)
	imf := func(t time.Time) string { return t.Format(http.TimeFormat) }
	for _, tc := range []struct {
		name   string
		header []string
		fresh  bool
	}{
		{"5.3 Expires, IMF-fixdate", []string{"Expires", imf(future)}, true},
		{"5.3 Expires, rfc850-date", []string{"Expires", future.Format("Monday, 02-Jan-06 15:04:05 GMT")}, true},
		{"5.3 Expires, asctime-date", []string{"Expires", future.Format(time.ANSIC)}, true},
		{"4.2 Expires, names in lower case", []string{"Expires", strings.ToLower(imf(future))}, true},
		{"5.3 Expires with runs of spaces", []string{"Expires", "Thu, 18  Aug  2050 02:01:18 GMT"}, false},
		{"5.3 Expires with a one-digit hour", []string{"Expires", "Thu, 18 Aug 2050 2:01:18 GMT"}, false},
		{"5.3 Expires with dashes", []string{"Expires", "Thu, 18-Aug-2050 02:01:18 GMT"}, false},
		{"5.3 Expires in UTC", []string{"Expires", "Thu, 18 Aug 2050 02:01:18 UTC"}, false},
		{"5.3 Expires without its comma", []string{"Expires", "Thu 18 Aug 2050 02:01:18 GMT"}, false},
		{"5.3 Expires on a 31st of June", []string{"Expires", "Fri, 31 Jun 2050 02:01:18 GMT"}, false},
		{"5.3 Expires twice", []string{"Expires", imf(future), "Expires", imf(future)}, false},
		{"5.3 Expires 0", []string{"Expires", "0"}, false},
		{"5.3 Expires past", []string{"Expires", imf(now.Add(-time.Hour))}, false},
		{"5.3 Expires invalid, max-age valid", []string{"Cache-Control", "max-age=3600", "Expires", "0"}, true},
		{"5.6.7 Date with a one-digit hour: the time received", []string{"Date", "Mon, 01 Jan 2024 3:00:00 GMT", "Expires", "Mon, 01 Jan 2024 03:00:30 GMT"}, false},
		{"5.6.7 Date twice: the time received", []string{"Date", "Mon, 01 Jan 2024 03:00:00 GMT", "Date", "Mon, 01 Jan 2024 03:00:00 GMT", "Expires", "Mon, 01 Jan 2024 03:00:30 GMT"}, false},
		{"5.6.7 Date invalid, Expires ahead of receipt", []string{"Date", "yesterday", "Expires", imf(future)}, true},
		{"5.1 Age, a list: its first member", []string{"Cache-Control", "max-age=3600", "Age", "7200, 0"}, false},
		{"5.1 Age, two lines: the first", []string{"Cache-Control", "max-age=3600", "Age", "7200", "Age", "0"}, false},
		{"5.1 Age, a list starting with 0", []string{"Cache-Control", "max-age=3600", "Age", "0, 7200"}, true},
		{"5.1 Age invalid: ignored", []string{"Cache-Control", "max-age=3600", "Age", "7200.0"}, true},
		{"5.2 max-age quoted", []string{"Cache-Control", `max-age="3600"`}, true},
		{"1.2.2 max-age with leading zeros", []string{"Cache-Control", "max-age=003600"}, true},
		{"1.2.2 max-age past 2^31", []string{"Cache-Control", "max-age=99999999999"}, true},
		{"5.2 directive names in upper case", []string{"Cache-Control", "MAX-AGE=3600"}, true},
		{"4.2.1 max-age twice", []string{"Cache-Control", "max-age=3600, max-age=1"}, false},
		{"4.2.1 max-age twice, on two lines", []string{"Cache-Control", "max-age=3600", "Cache-Control", "max-age=1"}, false},
		{"4.2.1 max-age not a delta-seconds", []string{"Cache-Control", "max-age=3600a"}, false},
		{"4.2.1 max-age single-quoted", []string{"Cache-Control", "max-age='3600'"}, false},
		{"4.2.1 max-age negative", []string{"Cache-Control", "max-age=-1"}, false},
		{"4.2.1 max-age decimal", []string{"Cache-Control", "max-age=3600.5"}, false},
		{"4.2.1 s-maxage invalid", []string{"Cache-Control", "s-maxage=soon, max-age=3600"}, false},
		{"5.2 max-age inside a quoted string, before", []string{"Cache-Control", `extension="max-age=3600", max-age=0`}, false},
		{"5.2 max-age inside a quoted string, after", []string{"Cache-Control", `max-age=0, extension="max-age=3600"`}, false},
		{"5.2 max-age with a space before =", []string{"Cache-Control", "max-age =3600"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reusedOrNot(t, srv, nil, tc.fresh, tc.header...)
		})
	}
}

// TestTargetedCacheControl: RFC 9213. CDN-Cache-Control, and ahead of it
// Options.TargetedCacheControl, replace Cache-Control and Expires when
// they hold a valid, non-empty Structured Fields Dictionary, and are
// ignored whole otherwise.
func TestTargetedCacheControl(t *testing.T) {
	srv := redistest.Start(t)
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name     string
		targeted string // Options.TargetedCacheControl
		header   []string
		fresh    bool
	}{
		{"2.2 over Cache-Control: no-store", "", []string{"CDN-Cache-Control", "max-age=3600", "Cache-Control", "no-store"}, true},
		{"2.2 over Expires", "", []string{"CDN-Cache-Control", "max-age=0", "Expires", future}, false},
		{"2.2 private", "", []string{"CDN-Cache-Control", "private", "Cache-Control", "max-age=3600"}, false},
		{"2.2 no-store", "", []string{"CDN-Cache-Control", "no-store", "Cache-Control", "max-age=3600"}, false},
		{"2.2 no-cache", "", []string{"CDN-Cache-Control", "no-cache", "Cache-Control", "max-age=3600"}, false},
		{"2.2 s-maxage", "", []string{"CDN-Cache-Control", "s-maxage=3600", "Cache-Control", "max-age=0"}, true},
		{"2.1 an extension ignored", "", []string{"CDN-Cache-Control", "foobar, max-age=3600"}, true},
		{"2.1 max-age past 2^31", "", []string{"CDN-Cache-Control", "max-age=99999999999", "Cache-Control", "no-store"}, true},
		{"2.1 invalid: ignored", "", []string{"CDN-Cache-Control", "max-age=3600, &&&&&", "Cache-Control", "no-store"}, false},
		{"2.1 invalid: Cache-Control followed", "", []string{"CDN-Cache-Control", "max-age=0, &&&&&", "Cache-Control", "max-age=3600"}, true},
		{"2.1 wrong type: ignored", "", []string{"CDN-Cache-Control", `max-age="3600"`, "Cache-Control", "no-store"}, false},
		{"2.1 negative: ignored", "", []string{"CDN-Cache-Control", "max-age=-1", "Cache-Control", "max-age=3600"}, true},
		{"2.1 upper-case key: ignored", "", []string{"CDN-Cache-Control", "MaX-aGe=3600", "Cache-Control", "no-store"}, false},
		{"2.1 empty: ignored", "", []string{"CDN-Cache-Control", "", "Cache-Control", "max-age=3600"}, true},
		{"2.2 targeted field first", "Corral-Cache-Control", []string{"Corral-Cache-Control", "max-age=3600", "CDN-Cache-Control", "no-store"}, true},
		{"2.2 targeted field no-store", "Corral-Cache-Control", []string{"Corral-Cache-Control", "no-store", "CDN-Cache-Control", "max-age=3600"}, false},
		{"2.2 targeted field invalid: the next", "Corral-Cache-Control", []string{"Corral-Cache-Control", "max-age=soon", "CDN-Cache-Control", "max-age=3600", "Cache-Control", "no-store"}, true},
		{"2.2 targeted field unnamed: not followed", "", []string{"Corral-Cache-Control", "max-age=3600", "Cache-Control", "no-store"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reusedOrNot(t, srv, func(o *corralhttp.Options) { o.TargetedCacheControl = tc.targeted }, tc.fresh, tc.header...)
		})
	}
}

// awaitExpiry waits until Redis holds no entry of a stored response under
// the prefix of t's Handler: each has passed its freshness and its
// stale-while-revalidate window, so corral no longer serves it. Second
// copies (http-v: keys) may stay.
func awaitExpiry(t *testing.T, srv *redistest.Server) {
	t.Helper()
	rdb := srv.Client()
	pattern := "t-" + strings.ReplaceAll(t.Name(), "/", "-") + ":e:*:http:*"
	eventually(t, "the stored responses' expiry", func() bool {
		keys, err := rdb.Keys(context.Background(), pattern).Result()
		return err == nil && len(keys) == 0
	})
}

// TestNeverServesStaleWithoutPermission: RFC 5861 and RFC 9111 section
// 4.2.4. Past its freshness and its stale-while-revalidate window, a
// response is served stale only inside its stale-if-error window, and
// only when the origin fails (500, 502, 503, 504, no answer, or none
// within OriginTimeout): never
// while the origin answers, never for another status, and never when
// must-revalidate, proxy-revalidate, s-maxage or no-cache forbid stale
// responses.
func TestNeverServesStaleWithoutPermission(t *testing.T) {
	srv := redistest.Start(t)
	const (
		closes = -1 // the origin closes the connection without an answer
		hangs  = -2 // the origin answers nothing within OriginTimeout
	)
	for _, tc := range []struct {
		name  string
		cc    string
		fail  int  // the origin's status once the response has expired; 0: 200
		stale bool // the expired response is served, STALE
	}{
		{"5861-4 stale-if-error, the origin answers", "max-age=1, stale-if-error=60", 0, false},
		{"5861-4 past stale-while-revalidate, the origin answers", "max-age=1, stale-while-revalidate=1, stale-if-error=60", 0, false},
		{"5861-4 stale-if-error, 503", "max-age=1, stale-if-error=60", 503, true},
		{"5861-4 stale-if-error, 500", "max-age=1, stale-if-error=60", 500, true},
		{"5861-4 stale-if-error, no answer", "max-age=1, stale-if-error=60", closes, true},
		{"5861-4 stale-if-error, no answer in time", "max-age=1, stale-if-error=60", hangs, true},
		{"4.2.4 must-revalidate, no answer in time", "max-age=1, stale-if-error=60, must-revalidate", hangs, false},
		{"5861-4 stale-if-error, 501 is no such error", "max-age=1, stale-if-error=60", 501, false},
		{"5861-4 stale-if-error, 404 is no error", "max-age=1, stale-if-error=60", 404, false},
		{"5861-4 past stale-while-revalidate, 503", "max-age=1, stale-while-revalidate=1, stale-if-error=60", 503, true},
		{"5861-3 past stale-while-revalidate, no stale-if-error", "max-age=1, stale-while-revalidate=1", 503, false},
		{"4.2.4 must-revalidate", "max-age=1, stale-if-error=60, must-revalidate", 503, false},
		{"4.2.4 proxy-revalidate", "max-age=1, stale-if-error=60, proxy-revalidate", 503, false},
		{"4.2.4 s-maxage", "s-maxage=1, stale-if-error=60", 503, false},
		{"4.2.4 no-cache", "no-cache, stale-if-error=60", 503, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var failing atomic.Bool
			o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				switch {
				case failing.Load() && tc.fail == closes:
					panic(http.ErrAbortHandler)
				case failing.Load() && tc.fail == hangs:
					<-r.Context().Done() // the Handler gives up at OriginTimeout
					return
				case failing.Load():
					w.WriteHeader(tc.fail)
				}
				w.Header().Set("Cache-Control", tc.cc)
				fmt.Fprintf(w, "#%d", n)
			})
			h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.OriginTimeout = 500 * time.Millisecond })
			expect(t, get(t, h, "/s"), corralhttp.Miss, 200, "#1")
			awaitExpiry(t, srv)
			failing.Store(tc.fail != 0)
			w := get(t, h, "/s")
			switch xc := w.Header().Get("X-Cache"); {
			case tc.stale:
				expect(t, w, corralhttp.Stale, 200, "#1")
			case xc == corralhttp.Stale || w.Body.String() == "#1":
				t.Errorf("served stale: %d %q, X-Cache %s", w.Code, w.Body.String(), xc)
			case tc.fail == 0:
				expect(t, w, corralhttp.Miss, 200, "#2")
			case tc.fail == closes && w.Code != http.StatusBadGateway, tc.fail == hangs && w.Code != http.StatusGatewayTimeout,
				tc.fail > 0 && w.Code != tc.fail:
				t.Errorf("status %d, want the origin's failure", w.Code)
			}
		})
	}
}

// seenAs is how the variant origin echoes a request header: its members,
// whitespace around them dropped, or "(none)".
func seenAs(h http.Header, name string) string {
	vs := h.Values(name)
	if len(vs) == 0 {
		return "(none)"
	}
	var members []string
	for _, v := range vs {
		for m := range strings.SplitSeq(v, ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
	}
	return "[" + strings.Join(members, ",") + "]"
}

// echoFooBar answers with cc and vary (a Vary line each), and a body
// saying what Foo and Bar the origin was sent.
func echoFooBar(cc string, vary ...string) func(http.ResponseWriter, *http.Request, int64) {
	return func(w http.ResponseWriter, r *http.Request, _ int64) {
		w.Header().Set("Cache-Control", cc)
		for _, v := range vary {
			w.Header().Add("Vary", v)
		}
		fmt.Fprintf(w, "Foo=%s Bar=%s", seenAs(r.Header, "Foo"), seenAs(r.Header, "Bar"))
	}
}

// TestNeverServesMismatchedVariant: RFC 9111 section 4.1. A response is
// never served to a request whose headers named by its Vary differ from
// those it was fetched with (the origin echoes Foo and Bar: each answer
// must echo the request's own, for those the origin is sent: the Vary'd
// ones, and the forwarded), whether the headers are forwarded or not.
// Values are compared normalised (lines combined, whitespace around commas
// dropped), names case-insensitively; a header absent matches only its
// absence.
func TestNeverServesMismatchedVariant(t *testing.T) {
	srv := redistest.Start(t)
	type step struct {
		headers []string // "Name: value"
		hit     bool     // served from the cache
	}
	for _, tc := range []struct {
		name    string
		forward []string
		cc      string
		vary    []string
		sent    []string // of Foo and Bar, those the origin is sent
		steps   []step
	}{
		{"4.1 one header", nil, "max-age=60", []string{"Foo"}, []string{"Foo"}, []step{
			{[]string{"Foo: 1"}, false}, {[]string{"Foo: 1"}, true}, {[]string{"Foo: 2"}, false},
			{nil, true}, {[]string{"Foo: 2"}, true}, {[]string{"Foo: "}, false}, {[]string{"Foo: 1", "Bar: 9"}, true}}},
		{"4.1 names case-insensitive", nil, "max-age=60", []string{"foo"}, []string{"Foo"}, []step{
			{[]string{"Foo: 1"}, false}, {[]string{"Foo: 1"}, true}, {[]string{"Foo: 2"}, false}, {nil, true}}},
		{"4.1 two headers", nil, "max-age=60", []string{"Foo, Bar"}, []string{"Foo", "Bar"}, []step{
			{[]string{"Foo: 1", "Bar: abc"}, false}, {[]string{"Foo: 1", "Bar: abc"}, true}, {[]string{"Foo: 2", "Bar: abc"}, false},
			{[]string{"Foo: 1"}, false}, {[]string{"Bar: abc"}, false}, {[]string{"Foo: 1", "Bar: abc"}, true}}},
		{"4.1 two Vary lines", nil, "max-age=60", []string{"Foo", "Bar"}, []string{"Foo", "Bar"}, []step{
			{[]string{"Foo: 1", "Bar: abc"}, false}, {[]string{"Foo: 1", "Bar: abc"}, true}, {[]string{"Foo: 1", "Bar: xyz"}, false}}},
		{"4.1 normalised values", nil, "max-age=60", []string{"Foo"}, []string{"Foo"}, []step{
			{[]string{"Foo: 1,2"}, false}, {[]string{"Foo:  1, 2 "}, true}, {[]string{"Foo: 1", "Foo: 2"}, true}, {[]string{"Foo: 2,1"}, false}}},
		{"4.1 a forwarded header and another", []string{"Foo"}, "max-age=60", []string{"Foo, Bar"}, []string{"Foo", "Bar"}, []step{
			{[]string{"Foo: 1", "Bar: abc"}, false}, {[]string{"Foo: 1", "Bar: abc"}, true}, {[]string{"Foo: 2", "Bar: abc"}, false},
			{[]string{"Foo: 1"}, true}, {[]string{"Foo: 1", "Bar: xyz"}, false}, {[]string{"Foo: 3"}, false}}},
		{"4.1 Vary: *", nil, "max-age=60", []string{"*"}, nil, []step{{[]string{"Foo: 1"}, false}, {[]string{"Foo: 1"}, false}}},
		{"4.1 Vary naming a header never forwarded", nil, "max-age=60", []string{"Foo, If-None-Match"}, nil, []step{
			{[]string{"Foo: 1"}, false}, {[]string{"Foo: 1"}, false}}},
		{"4.1 no-cache", nil, "no-cache", []string{"Foo"}, []string{"Foo"}, []step{
			{[]string{"Foo: 1"}, false}, {[]string{"Foo: 2"}, false}, {[]string{"Foo: 1"}, false}, {nil, false}, {[]string{"Foo: 2"}, false}}},
		{"4.1 already stale", nil, "max-age=0", []string{"Foo"}, []string{"Foo"}, []step{
			{[]string{"Foo: 1"}, false}, {[]string{"Foo: 2"}, false}, {nil, false}, {[]string{"Foo: 1"}, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := startOrigin(t, echoFooBar(tc.cc, tc.vary...))
			h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.ForwardHeaders = tc.forward })
			for i, st := range tc.steps {
				r := newRequest("/v")
				for _, kv := range st.headers {
					k, v, _ := strings.Cut(kv, ": ")
					r.Header.Add(k, v)
				}
				w := serve(h, r)
				sent := http.Header{}
				for _, name := range tc.sent {
					sent[name] = r.Header[name]
				}
				want := fmt.Sprintf("Foo=%s Bar=%s", seenAs(sent, "Foo"), seenAs(sent, "Bar"))
				if got := w.Body.String(); got != want {
					t.Errorf("step %d %q: served %q, fetched for other headers than the request's (%s)", i, st.headers, got, want)
				}
				if hit := w.Header().Get("X-Cache") == corralhttp.Hit; hit != st.hit {
					t.Errorf("step %d %q: X-Cache %s, want a hit %v", i, st.headers, w.Header().Get("X-Cache"), st.hit)
				}
			}
		})
	}
	t.Run("4.1 a variant passed is sent its headers", func(t *testing.T) {
		t.Parallel()
		o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Cache-Control", "max-age=60")
			if r.Header.Get("Foo") == "1" {
				w.Header().Set("Cache-Control", "private") // that variant passes
			}
			w.Header().Set("Vary", "Foo")
			fmt.Fprintf(w, "Foo=%s", seenAs(r.Header, "Foo"))
		})
		h := newHandler(t, srv, o, nil)
		expect(t, get(t, h, "/pv", "Foo: 1"), corralhttp.Miss, 200, "Foo=[1]")
		expect(t, get(t, h, "/pv", "Foo: 1"), corralhttp.Pass, 200, "Foo=[1]")
		expect(t, get(t, h, "/pv"), corralhttp.Hit, 200, "Foo=(none)")
	})
	for _, tc := range []struct {
		name    string
		header  []string // the 5xx's, name and value
		first   []string // the request whose load the others join
		waiters [][]string
		shared  bool // whether the 5xx may answer any request but first
	}{
		{"4.1 a 5xx not stored, Vary beyond the key", []string{"Vary", "Foo"}, nil, [][]string{nil, {"Foo: 1"}, {"Foo: 2"}, {"Foo: 1"}}, true},
		{"4.1 a 5xx not stored, Vary: *", []string{"Vary", "*"}, nil, [][]string{nil, {"Foo: 1"}}, false},
		{"4.1 a variant's 5xx, Vary beyond its key", []string{"Vary", "Foo, Bar"}, []string{"Foo: 1"}, [][]string{{"Foo: 1"}, {"Foo: 1", "Bar: x"}}, true},
		{"5.2.2.7 a private 5xx", []string{"Cache-Control", "private"}, nil, [][]string{nil, nil}, false},
		{"5.2.2.5 a no-store 5xx", []string{"Cache-Control", "no-store"}, nil, [][]string{nil, nil}, false},
		{"a 5xx with Set-Cookie", []string{"Set-Cookie", "session=alice"}, nil, [][]string{nil, nil}, false},
		{"3.5 a 5xx fetched with Authorization", nil, []string{"Authorization: Bearer alice"}, [][]string{{"Authorization: Bearer bob"}}, false},
		{"3.5 a public 5xx fetched with Authorization", []string{"Cache-Control", "public"}, []string{"Authorization: Bearer alice"}, [][]string{{"Authorization: Bearer bob"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testErrorOnlyWhereItFits(t, srv, tc.header, tc.first, tc.waiters, tc.shared)
		})
	}
	t.Run("4.3.1 revalidation sends the Vary'd header", func(t *testing.T) {
		t.Parallel()
		testVariantRevalidation(t, srv)
	})
	t.Run("4.4 invalidation reaches every variant", func(t *testing.T) {
		t.Parallel()
		o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "Foo")
			fmt.Fprintf(w, "%s #%d", seenAs(r.Header, "Foo"), n)
		})
		h := newHandler(t, srv, o, nil)
		expect(t, get(t, h, "/i", "Foo: 1"), corralhttp.Miss, 200, "[1] #2") // #1: the URL's own, without Foo
		expect(t, get(t, h, "/i", "Foo: 1"), corralhttp.Hit, 200, "[1] #2")
		expect(t, do(t, h, http.MethodPost, "/i"), corralhttp.Pass, 200, "(none) #3")
		expect(t, get(t, h, "/i", "Foo: 1"), corralhttp.Miss, 200, "[1] #5")
	})
}

// testVariantRevalidation: a variant's revalidation sends the origin the
// Vary'd header with that variant's validator, and the 304 refreshes it.
func testVariantRevalidation(t *testing.T, srv *redistest.Server) {
	var mismatched, variant atomic.Int64 // conditional requests: with another variant's ETag; of the Foo: 2 variant
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		foo := r.Header.Get("Foo")
		etag := `"foo-` + foo + `"`
		w.Header().Set("ETag", etag)
		w.Header().Set("Vary", "Foo")
		w.Header().Set("Cache-Control", "max-age=1")
		if inm := r.Header.Get("If-None-Match"); inm != "" {
			if inm != etag {
				mismatched.Add(1)
			}
			if foo == "2" {
				variant.Add(1)
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "foo="+foo)
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/rv", "Foo: 2"), corralhttp.Miss, 200, "foo=2")
	eventually(t, "the variant's revalidation", func() bool {
		if w := get(t, h, "/rv", "Foo: 2"); w.Code != 200 || w.Body.String() != "foo=2" {
			t.Fatalf("%d %q", w.Code, w.Body.String())
		}
		return variant.Load() > 0
	})
	if n := mismatched.Load(); n != 0 {
		t.Errorf("%d revalidations sent one variant's ETag with another's Foo", n)
	}
}

// TestNeverSharesPrivate: RFC 9111 sections 3, 3.5, 5.2.1.5, 5.2.2.5 and
// 5.2.2.7, and RFC 9213 section 2.2. What private, no-store or the
// Authorization rules keep to one client is never stored, nor served to
// another: the second client's request reaches the origin.
func TestNeverSharesPrivate(t *testing.T) {
	srv := redistest.Start(t)
	alice, bob := []string{"Authorization: Bearer alice"}, []string{"Authorization: Bearer bob"}
	for _, tc := range []struct {
		name          string
		targeted      string
		header        []string
		first, second []string // the two clients' request headers
	}{
		{"5.2.2.7 private", "", []string{"Cache-Control", "private, max-age=60"}, nil, nil},
		{"5.2.2.7 private, qualified", "", []string{"Cache-Control", `private="Set-Cookie", max-age=60`}, nil, nil},
		{"5.2.2.7 private, upper case", "", []string{"Cache-Control", "PRIVATE, max-age=60"}, nil, nil},
		{"5.2.2.7 private, on a second line", "", []string{"Cache-Control", "public, max-age=60", "Cache-Control", "private"}, nil, nil},
		{"5.2.2.5 no-store", "", []string{"Cache-Control", "no-store, max-age=60"}, nil, nil},
		{"5.2.2.5 no-store after public", "", []string{"Cache-Control", "public, max-age=60, no-store"}, nil, nil},
		{"5.2.1.5 no-store in the request", "", []string{"Cache-Control", "max-age=60"}, []string{"Cache-Control: no-store"}, nil},
		{"3 Set-Cookie", "", []string{"Cache-Control", "max-age=60", "Set-Cookie", "id=alice"}, nil, nil},
		{"9213 CDN-Cache-Control: private", "", []string{"CDN-Cache-Control", "private", "Cache-Control", "max-age=60"}, nil, nil},
		{"9213 CDN-Cache-Control: no-store", "", []string{"CDN-Cache-Control", "no-store", "Cache-Control", "public, max-age=60"}, nil, nil},
		{"9213 targeted field: private", "Corral-Cache-Control", []string{"Corral-Cache-Control", "private", "CDN-Cache-Control", "max-age=60"}, nil, nil},
		{"3.5 Authorization, not public", "", []string{"Cache-Control", "max-age=60"}, alice, bob},
		{"3.5 Authorization, Vary: Authorization", "", []string{"Cache-Control", "public, max-age=60", "Vary", "Authorization"}, alice, bob},
		{"3.5 Authorization, then none", "", []string{"Cache-Control", "public, max-age=60"}, alice, nil},
		{"3.5 none, then Authorization", "", []string{"Cache-Control", "max-age=60"}, nil, alice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := startOrigin(t, counted(tc.header...))
			h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.TargetedCacheControl = tc.targeted })
			if w := get(t, h, "/p", tc.first...); w.Body.String() != "#1" {
				t.Fatalf("first client: %d %q", w.Code, w.Body.String())
			}
			w := get(t, h, "/p", tc.second...)
			if w.Body.String() != "#2" || o.requests.Load() != 2 {
				t.Errorf("second client: %q, X-Cache %s, origin requests %d; want its own answer from the origin",
					w.Body.String(), w.Header().Get("X-Cache"), o.requests.Load())
			}
		})
	}
}

// TestNeverServesBodyUnderAnotherETag: RFC 9111 section 4.3.4. A 304 to a
// revalidation that names another ETag than the stored response's
// refreshes nothing: the response is fetched whole, and no body is ever
// served under an ETag other than its own, nor a client's If-None-Match
// answered 304 for a body whose ETag it does not match.
func TestNeverServesBodyUnderAnotherETag(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		switch {
		case r.Header.Get("If-None-Match") != "":
			w.Header().Set("ETag", `"b"`) // about another response than the one asked
			w.Header().Set("Cache-Control", "max-age=60")
			w.WriteHeader(http.StatusNotModified)
		case n == 1:
			w.Header().Set("ETag", `"a"`)
			w.Header().Set("Cache-Control", "max-age=1")
			io.WriteString(w, "A")
		default:
			w.Header().Set("ETag", `"b"`)
			w.Header().Set("Cache-Control", "max-age=60")
			io.WriteString(w, "B")
		}
	})
	h := newHandler(t, srv, o, nil)
	bodyOf := map[string]string{`"a"`: "A", `"b"`: "B"}
	eventually(t, "the response replaced", func() bool {
		w := get(t, h, "/e")
		if etag := w.Header().Get("ETag"); w.Code != 200 || bodyOf[etag] != w.Body.String() {
			t.Fatalf("%d: body %q under ETag %s", w.Code, w.Body.String(), etag)
		}
		return w.Body.String() == "B"
	})
	expect(t, get(t, h, "/e"), corralhttp.Hit, 200, "B")
	for inm, want := range map[string]int{`"a"`: 200, `"b"`: 304, `"q,r", W/"b"`: 304, `"q,b"`: 200, `W/"a", "c"`: 200, `*`: 304} {
		if w := get(t, h, "/e", "If-None-Match: "+inm); w.Code != want {
			t.Errorf("If-None-Match %s: %d, want %d", inm, w.Code, want)
		}
	}
}

// storedTTL returns how long Redis keeps the one stored response of t's
// Handler (an entry's Redis TTL is its freshness plus its stale window).
func storedTTL(t *testing.T, srv *redistest.Server) time.Duration {
	t.Helper()
	rdb := srv.Client()
	keys, err := rdb.Keys(context.Background(), "t-"+strings.ReplaceAll(t.Name(), "/", "-")+":e:*:http:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("stored entries %q (%v), want 1", keys, err)
	}
	ttl, err := rdb.PTTL(context.Background(), keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ttl
}

// TestHeuristicFreshness: RFC 9111 section 4.2.2 (and section 3, RFC
// 9110 section 15.1). A response without explicit freshness, of a
// heuristically cacheable status or public, with a valid Last-Modified, is
// fresh for a tenth of the time from it to its Date, at most
// HeuristicMaxTTL; DefaultTTL counts only without it.
func TestHeuristicFreshness(t *testing.T) {
	srv := redistest.Start(t)
	now := time.Now().UTC()
	ago := func(d time.Duration) string { return now.Add(-d).Format(http.TimeFormat) }
	for _, tc := range []struct {
		name   string
		status int
		header []string
		adjust func(*corralhttp.Options)
		fresh  time.Duration // 0: not stored
	}{
		{"4.2.2 10% of Date - Last-Modified", 200, []string{"Last-Modified", ago(10 * time.Hour)}, nil, time.Hour},
		{"4.2.2 at most HeuristicMaxTTL, 24h by default", 200, []string{"Last-Modified", ago(1000 * time.Hour)}, nil, 24 * time.Hour},
		{"4.2.2 HeuristicMaxTTL", 200, []string{"Last-Modified", ago(100 * time.Hour)}, func(o *corralhttp.Options) { o.HeuristicMaxTTL = 2 * time.Hour }, 2 * time.Hour},
		{"4.2.2 ahead of DefaultTTL", 200, []string{"Last-Modified", ago(10 * time.Hour)}, func(o *corralhttp.Options) { o.DefaultTTL = time.Minute }, time.Hour},
		{"4.2.2 without Date: from its receipt", 200, []string{"Last-Modified", ago(10 * time.Hour), "Date", ""}, nil, time.Hour},
		{"4.2.3 Age counts", 200, []string{"Last-Modified", ago(10 * time.Hour), "Age", "600"}, nil, 50 * time.Minute},
		{"15.1 404 is heuristically cacheable", 404, []string{"Last-Modified", ago(10 * time.Hour)}, nil, time.Hour},
		{"3 public", 302, []string{"Last-Modified", ago(10 * time.Hour), "Cache-Control", "public"}, nil, time.Hour},
		{"3 not heuristically cacheable", 302, []string{"Last-Modified", ago(10 * time.Hour)}, nil, 0},
		{"4.2.2 explicit freshness wins", 200, []string{"Last-Modified", ago(10 * time.Hour), "Cache-Control", "max-age=30"}, nil, 30 * time.Second},
		{"4.2.2 max-age=0 wins", 200, []string{"Last-Modified", ago(10 * time.Hour), "Cache-Control", "max-age=0"}, nil, 0},
		{"5.6.7 Last-Modified invalid", 200, []string{"Last-Modified", "Mon, 02 Nov 2026 9:00:00 GMT"}, nil, 0},
		{"4.2.2 Last-Modified after Date", 200, []string{"Last-Modified", now.Add(time.Hour).Format(http.TimeFormat)}, nil, 0},
		{"no Last-Modified: DefaultTTL", 200, nil, func(o *corralhttp.Options) { o.DefaultTTL = time.Minute }, time.Minute},
		{"no Last-Modified, no DefaultTTL", 200, nil, nil, 0},
		{"DisableHeuristicFreshness: DefaultTTL", 200, []string{"Last-Modified", ago(10 * time.Hour)},
			func(o *corralhttp.Options) { o.DisableHeuristicFreshness, o.DefaultTTL = true, time.Minute }, time.Minute},
		{"DisableHeuristicFreshness", 200, []string{"Last-Modified", ago(10 * time.Hour)},
			func(o *corralhttp.Options) { o.DisableHeuristicFreshness = true }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
				for i := 0; i+1 < len(tc.header); i += 2 {
					if tc.header[i+1] == "" {
						w.Header()[tc.header[i]] = nil // none: net/http sends no Date
						continue
					}
					w.Header().Set(tc.header[i], tc.header[i+1])
				}
				w.WriteHeader(tc.status)
				fmt.Fprintf(w, "#%d", n)
			})
			h := newHandler(t, srv, o, tc.adjust)
			get(t, h, "/h")
			w := get(t, h, "/h")
			if hit := w.Header().Get("X-Cache") == corralhttp.Hit; hit != (tc.fresh > 0) {
				t.Fatalf("second request: X-Cache %s, %q; want a hit %v", w.Header().Get("X-Cache"), w.Body.String(), tc.fresh > 0)
			}
			if tc.fresh == 0 {
				return
			}
			if ttl := storedTTL(t, srv); ttl > tc.fresh+time.Second || ttl < tc.fresh-10*time.Second { // (Last-Modified is in whole seconds)
				t.Errorf("stored for %v, want %v", ttl, tc.fresh)
			}
		})
	}
}

// testErrorOnlyWhereItFits: a 5xx the cache does not store (with header)
// is given to the requests that coalesced on its load only where it would
// be served if stored (RFC 9111 sections 3.5 and 4.1): first's request
// loads it (a variant's, when first has Foo: a stored response varies on
// Foo), and waiters join that load before the origin answers. Every
// answer echoes the request's own Foo and Bar (none are forwarded; a
// variant's load, or a pass, sends those its Vary names); unless shared,
// no answer goes to two requests.
func testErrorOnlyWhereItFits(t *testing.T, srv *redistest.Server, header, first []string, waiters [][]string, shared bool) {
	variant := slices.ContainsFunc(first, func(h string) bool { return strings.HasPrefix(h, "Foo:") })
	release := make(chan struct{})
	var gated atomic.Bool
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if variant && n == 1 { // the URL's own response, sending variants to their keys
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "Foo")
			return
		}
		if gated.CompareAndSwap(false, true) {
			<-release
		}
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Add(header[i], header[i+1])
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "Foo=%s Bar=%s #%d", seenAs(r.Header, "Foo"), seenAs(r.Header, "Bar"), n)
	})
	open := sync.OnceFunc(func() { close(release) })
	t.Cleanup(open) // before the origin closes, should the test fail first
	h := newHandler(t, srv, o, nil)
	if variant {
		get(t, h, "/e") // stores the URL's own response
	}
	before := o.requests.Load()
	all := append([][]string{first}, waiters...)
	answers := make([]*httptest.ResponseRecorder, len(all))
	done := make(chan struct{})
	go func() {
		defer close(done)
		answers[0] = get(t, h, "/e", first...)
	}()
	eventually(t, "the first request's load at the origin", func() bool { return o.requests.Load() > before })
	joined := h.Stats().Joined
	var wg sync.WaitGroup
	for i, hs := range waiters {
		wg.Go(func() { answers[i+1] = get(t, h, "/e", hs...) })
	}
	eventually(t, "the waiters on its load", func() bool { return h.Stats().Joined-joined >= uint64(len(waiters)) })
	open()
	wg.Wait()
	<-done
	bodies := map[string]bool{}
	for i, w := range answers {
		r := httptest.NewRequest(http.MethodGet, "/e", nil)
		for _, kv := range all[i] {
			k, v, _ := strings.Cut(kv, ": ")
			r.Header.Add(k, v)
		}
		want := fmt.Sprintf("Foo=%s Bar=%s #", seenAs(r.Header, "Foo"), seenAs(r.Header, "Bar"))
		if slices.Contains(header, "*") {
			want = "Foo=(none) Bar=(none) #" // only the forwarded headers are sent
		}
		if w.Code != http.StatusServiceUnavailable || !strings.HasPrefix(w.Body.String(), want) {
			t.Errorf("request %d %q: %d %q, want 503 %q...: an answer fetched for other headers", i, all[i], w.Code, w.Body.String(), want)
		}
		if !shared && bodies[w.Body.String()] {
			t.Errorf("request %d %q: %q shared (%q)", i, all[i], w.Body.String(), header)
		}
		bodies[w.Body.String()] = true
	}
}
