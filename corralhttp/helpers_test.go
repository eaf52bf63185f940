package corralhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// origin is a real HTTP server that counts the requests it answers and
// remembers the headers of the last one.
type origin struct {
	*httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	last     http.Header // guarded by mu
	serve    func(w http.ResponseWriter, r *http.Request, n int64)
}

// startOrigin starts an origin whose n-th request (from 1) serve answers.
func startOrigin(t *testing.T, serve func(w http.ResponseWriter, r *http.Request, n int64)) *origin {
	t.Helper()
	o := &origin{serve: serve}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := o.requests.Add(1)
		o.mu.Lock()
		o.last = r.Header.Clone()
		o.mu.Unlock()
		o.serve(w, r, n)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *origin) lastHeader() http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// fixed answers every request with body and the given Cache-Control.
func fixed(cc, body string) func(http.ResponseWriter, *http.Request, int64) {
	return func(w http.ResponseWriter, _ *http.Request, _ int64) {
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		io.WriteString(w, body)
	}
}

// newHandler returns a Handler in front of o, over the Redis of srv, under
// a prefix of its own.
func newHandler(t *testing.T, srv *redistest.Server, o *origin, adjust func(*corralhttp.Options)) *corralhttp.Handler {
	t.Helper()
	return newHandlerOn(t, srv.Client(), o, adjust)
}

// newHandlerOn is newHandler over the Redis client rdb.
func newHandlerOn(t *testing.T, rdb redis.UniversalClient, o *origin, adjust func(*corralhttp.Options)) *corralhttp.Handler {
	t.Helper()
	u, err := url.Parse(o.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts := corralhttp.Options{Origin: u, Cache: &corral.Options{Prefix: "t-" + strings.ReplaceAll(t.Name(), "/", "-")}}
	if adjust != nil {
		adjust(&opts)
	}
	h, err := corralhttp.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// get sends a GET for target through h, with the given headers
// ("Name: value" each), and returns the recorded response.
func get(t *testing.T, h http.Handler, target string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	return do(t, h, http.MethodGet, target, headers...)
}

func do(t *testing.T, h http.Handler, method, target string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	for _, kv := range headers {
		k, v, _ := strings.Cut(kv, ": ")
		r.Header.Add(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// expect checks a response's X-Cache value, status and body.
func expect(t *testing.T, w *httptest.ResponseRecorder, xcache string, status int, body string) {
	t.Helper()
	if got := w.Header().Get("X-Cache"); got != xcache {
		t.Errorf("X-Cache = %q, want %q (status %d, body %q)", got, xcache, w.Code, w.Body.String())
	}
	if w.Code != status {
		t.Errorf("status = %d, want %d (body %q)", w.Code, status, w.Body.String())
	}
	if got := w.Body.String(); got != body {
		t.Errorf("body = %q, want %q", got, body)
	}
}

// eventually polls cond until it holds, failing t after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.EventuallyEvery(t, 10*time.Second, 10*time.Millisecond, what, cond)
}

// parallel runs f(i) for i in [0, n) at once, released together.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

var _ = context.Background

func newRequest(target string) *http.Request { return httptest.NewRequest(http.MethodGet, target, nil) }

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}
