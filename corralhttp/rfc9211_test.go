package corralhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
)

// RFC 9211 (Cache-Status), section by section, with a real origin and a
// real redis-server: each response the Handler serves names the cache
// and says how it was served, after the members the origin sent (the
// list runs from the origin to the client); the errors it makes up carry
// none.

// cacheStatusOf checks that w's Cache-Status is a Structured Fields List
// (RFC 9211 section 2) and returns it.
func cacheStatusOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	cs := w.Header().Values("Cache-Status")
	if _, err := httpsfv.UnmarshalList(cs); len(cs) > 0 && err != nil {
		t.Errorf("Cache-Status %q is not a Structured Fields List: %v", cs, err)
	}
	return w.Header().Get("Cache-Status")
}

// TestCacheStatus: RFC 9211 section 2's parameters, one way of serving a
// response each.
func TestCacheStatus(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name   string
		origin func(w http.ResponseWriter, r *http.Request, n int64)
		adjust func(*corralhttp.Options)
		// run sends the requests, and returns the response to check.
		run    func(t *testing.T, h http.Handler, srv *redistest.Server) *httptest.ResponseRecorder
		xcache string
		want   string // the Cache-Status
	}{
		{"2.1 hit", counted("Cache-Control", "max-age=60"), nil, twice, corralhttp.Hit, "corral; hit"},
		{"2.1 hit, a 304 from the cache", counted("Cache-Control", "max-age=60", "ETag", `"e"`), nil,
			func(t *testing.T, h http.Handler, _ *redistest.Server) *httptest.ResponseRecorder {
				get(t, h, "/c")
				return get(t, h, "/c", `If-None-Match: "e"`)
			}, corralhttp.Hit, "corral; hit"},
		{"2.1 hit, stale while it is revalidated", counted("Cache-Control", "max-age=1, stale-while-revalidate=60"), nil,
			untilStale, corralhttp.Stale, "corral; hit; detail=stale"},
		{"2.2 fwd=uri-miss, 2.5 stored", counted("Cache-Control", "max-age=60"), nil, once, corralhttp.Miss, "corral; fwd=uri-miss; stored"},
		{"2.5 not stored: private", counted("Cache-Control", "private, max-age=60"), nil, once, corralhttp.Miss, "corral; fwd=uri-miss"},
		{"2.5 not stored: the request's no-store", counted("Cache-Control", "max-age=60"), nil,
			func(t *testing.T, h http.Handler, _ *redistest.Server) *httptest.ResponseRecorder {
				return get(t, h, "/c", "Cache-Control: no-store")
			},
			corralhttp.Miss, "corral; fwd=uri-miss"},
		{"2.2 fwd=stale, 2.3 fwd-status: a 304 refreshed it", revalidated, nil, afterExpiry, corralhttp.Miss, "corral; fwd=stale; fwd-status=304; stored"},
		{"2.2 fwd=stale: replaced", counted("Cache-Control", "max-age=1", "ETag", `"e"`), nil, afterExpiry, corralhttp.Miss, "corral; fwd=stale; stored"},
		{"2.2 fwd=stale, 2.3 fwd-status: stale-if-error", failsAfterFirst(503), nil, afterExpiry, corralhttp.Stale, "corral; fwd=stale; fwd-status=503"},
		{"2.2 fwd=stale, no answer: stale-if-error", failsAfterFirst(0), nil, afterExpiry, corralhttp.Stale, "corral; fwd=stale; detail=origin-error"},
		{"2.2 fwd=bypass: the URL passes", counted("Cache-Control", "private"), nil, twice, corralhttp.Pass, "corral; fwd=bypass"},
		{"2.2 fwd=method", counted("Cache-Control", "max-age=60"), nil,
			func(t *testing.T, h http.Handler, _ *redistest.Server) *httptest.ResponseRecorder {
				return do(t, h, http.MethodPost, "/c")
			},
			corralhttp.Pass, "corral; fwd=method"},
		{"2 the origin's members first", counted("Cache-Control", "max-age=60", "Cache-Status", `upstream; fwd=uri-miss; stored`),
			nil, twice, corralhttp.Hit, "upstream; fwd=uri-miss; stored, corral; hit"},
		{"2 the origin's members first, on two lines", counted("Cache-Control", "max-age=60", "Cache-Status", "a; hit", "Cache-Status", `b; fwd=bypass`),
			nil, once, corralhttp.Miss, "a; hit, b; fwd=bypass, corral; fwd=uri-miss; stored"},
		{"2 Options.CacheName", counted("Cache-Control", "max-age=60"), func(o *corralhttp.Options) { o.CacheName = "edge-1" },
			twice, corralhttp.Hit, "edge-1; hit"},
		{"2 none on an error the cache makes up", func(w http.ResponseWriter, _ *http.Request, _ int64) { panic(http.ErrAbortHandler) },
			nil, once, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := startOrigin(t, tc.origin)
			h := newHandler(t, srv, o, func(o *corralhttp.Options) {
				o.OriginTimeout = 500 * time.Millisecond
				if tc.adjust != nil {
					tc.adjust(o)
				}
			})
			w := tc.run(t, h, srv)
			if got := w.Header().Get("X-Cache"); got != tc.xcache {
				t.Errorf("X-Cache %q, want %q (status %d)", got, tc.xcache, w.Code)
			}
			if got := cacheStatusOf(t, w); got != tc.want {
				t.Errorf("Cache-Status %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("2.7 collapsed", func(t *testing.T) {
		t.Parallel()
		testCollapsed(t, srv)
	})
	t.Run("2 a CacheName that is no token starting with a letter", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"1st", "edge one", "edge;1", "*edge"} {
			_, err := corralhttp.New(srv.Client(), corralhttp.Options{Origin: &url.URL{Scheme: "http", Host: "origin"}, CacheName: name})
			if !errors.Is(err, corralhttp.ErrInvalidOptions) {
				t.Errorf("CacheName %q: %v, want ErrInvalidOptions", name, err)
			}
		}
	})
}

func once(t *testing.T, h http.Handler, _ *redistest.Server) *httptest.ResponseRecorder {
	return get(t, h, "/c")
}

func twice(t *testing.T, h http.Handler, _ *redistest.Server) *httptest.ResponseRecorder {
	get(t, h, "/c")
	return get(t, h, "/c")
}

// untilStale sends requests until one is served stale, and returns it.
func untilStale(t *testing.T, h http.Handler, _ *redistest.Server) *httptest.ResponseRecorder {
	var w *httptest.ResponseRecorder
	eventually(t, "a stale answer", func() bool {
		w = get(t, h, "/c")
		return w.Header().Get("X-Cache") == corralhttp.Stale
	})
	return w
}

// afterExpiry sends a request, waits for its response to expire, and
// sends another.
func afterExpiry(t *testing.T, h http.Handler, srv *redistest.Server) *httptest.ResponseRecorder {
	get(t, h, "/c")
	awaitExpiry(t, srv)
	return get(t, h, "/c")
}

// revalidated answers with an ETag, fresh for a second, and 304 to a
// request that has it.
func revalidated(w http.ResponseWriter, r *http.Request, n int64) {
	w.Header().Set("Cache-Control", "max-age=1")
	w.Header().Set("ETag", `"e"`)
	if r.Header.Get("If-None-Match") == `"e"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	fmt.Fprintf(w, "#%d", n)
}

// failsAfterFirst answers its first request with a response fresh for a
// second, with stale-if-error, and the others with status, or with no
// answer when status is 0.
func failsAfterFirst(status int) func(http.ResponseWriter, *http.Request, int64) {
	return func(w http.ResponseWriter, r *http.Request, n int64) {
		switch {
		case n == 1:
			w.Header().Set("Cache-Control", "max-age=1, stale-if-error=60")
			io.WriteString(w, "#1")
		case status == 0:
			panic(http.ErrAbortHandler)
		default:
			w.WriteHeader(status)
		}
	}
}

// waitStarts counts the flights that found another process's load under
// way and waited for it.
type waitStarts struct{ n atomic.Int64 }

func (o *waitStarts) Observe(_ context.Context, e corral.Event) {
	if e.Kind == corral.EventWaitStart {
		o.n.Add(1)
	}
}

// testCollapsed: a request that waits for another's load (here, on
// another Handler, as in another process) is served its response,
// collapsed (RFC 9211 section 2.7; RFC 9111 section 4).
func testCollapsed(t *testing.T, srv *redistest.Server) {
	release := make(chan struct{})
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "body")
	})
	a := newHandler(t, srv, o, nil)
	waits := new(waitStarts)
	b := newHandler(t, srv, o, func(o *corralhttp.Options) { o.Cache.Observer = waits })
	answers := make(chan *httptest.ResponseRecorder, 2)
	go func() { answers <- get(t, a, "/c") }()
	eventually(t, "the first origin request", func() bool { return o.requests.Load() > 0 })
	go func() { answers <- get(t, b, "/c") }()
	eventually(t, "the second request waiting", func() bool { return waits.n.Load() > 0 })
	close(release)
	want := map[string]string{corralhttp.Miss: "corral; fwd=uri-miss; stored", corralhttp.Coalesced: "corral; fwd=uri-miss; collapsed"}
	for range 2 {
		w := <-answers
		xc := w.Header().Get("X-Cache")
		if got := cacheStatusOf(t, w); got != want[xc] {
			t.Errorf("X-Cache %s: Cache-Status %q, want %q", xc, got, want[xc])
		}
		delete(want, xc)
	}
	if o.requests.Load() != 1 {
		t.Errorf("origin requests %d, want 1", o.requests.Load())
	}
}
