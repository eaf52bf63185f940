package corralhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
)

// Tags and purging (tags.go, purge.go): each with a real origin and
// redis-server.

// noTags fails t if a response passes the origin's Surrogate-Key or
// Cache-Tag on to the client.
func noTags(t *testing.T, what string, h http.Header) {
	t.Helper()
	if v := h.Values("Surrogate-Key"); len(v) > 0 {
		t.Errorf("%s: Surrogate-Key %q reaches the client", what, v)
	}
	if v := h.Values("Cache-Tag"); len(v) > 0 {
		t.Errorf("%s: Cache-Tag %q reaches the client", what, v)
	}
}

// purge purges p through h, failing t if it fails.
func purge(t *testing.T, h *corralhttp.Handler, p corralhttp.Purge) {
	t.Helper()
	if err := h.Purge(context.Background(), p); err != nil {
		t.Fatalf("Purge(%+v): %v", p, err)
	}
}

// The members of Surrogate-Key and Cache-Tag become the stored response's
// tags, and neither header reaches a client: not from a MISS, a HIT, a
// response that may not be shared, a pass, a POST. A purge of one of the
// tags drops the response; a purge of a tag it does not carry leaves it.
func TestSurrogateKeys(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Add("Surrogate-Key", "product-42  category-7")
		w.Header().Add("Surrogate-Key", "product-42")
		w.Header().Set("Cache-Tag", "shop, ,summer sale")
		switch {
		case r.Method == http.MethodPost:
		case r.URL.Path == "/private":
			w.Header().Set("Cache-Control", "private")
		default:
			w.Header().Set("Cache-Control", "max-age=60")
		}
		fmt.Fprintf(w, "v%d", n)
	})
	h := newHandler(t, srv, o, nil)

	w := get(t, h, "/p")
	expect(t, w, corralhttp.Miss, 200, "v1")
	noTags(t, "MISS", w.Header())
	w = get(t, h, "/p")
	expect(t, w, corralhttp.Hit, 200, "v1")
	noTags(t, "HIT", w.Header())
	for i, path := range []string{"/private", "/private"} { // its own load's answer, then a pass
		w := get(t, h, path)
		noTags(t, "GET "+path+" ("+w.Header().Get("X-Cache")+")", w.Header())
		if want := []string{corralhttp.Miss, corralhttp.Pass}[i]; w.Header().Get("X-Cache") != want {
			t.Errorf("GET /private: X-Cache %q, want %q", w.Header().Get("X-Cache"), want)
		}
	}
	noTags(t, "POST", do(t, h, http.MethodPost, "/other").Header())

	purge(t, h, corralhttp.Purge{Keys: []string{"product-7", "winter"}}) // tags it does not carry
	expect(t, get(t, h, "/p"), corralhttp.Hit, 200, "v1")
	for _, key := range []string{"category-7", "product-42", "shop", "summer", "sale"} {
		purge(t, h, corralhttp.Purge{Keys: []string{key}})
		w := get(t, h, "/p")
		if w.Header().Get("X-Cache") != corralhttp.Miss {
			t.Fatalf("GET /p after a purge of %q: X-Cache %q, want MISS", key, w.Header().Get("X-Cache"))
		}
		expect(t, get(t, h, "/p"), corralhttp.Hit, 200, w.Body.String())
	}
}

// A hard purge of a key: the next request asks the origin (MISS) and gets
// its new answer; the response is then stored again.
func TestPurgeKeyHard(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Surrogate-Key", "k")
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"same"`) // kept as a second copy, which a hard purge drops too: no conditional request
		if r.Header.Get("If-None-Match") != "" {
			t.Errorf("a conditional request after a hard purge: If-None-Match %q", r.Header.Get("If-None-Match"))
		}
		fmt.Fprintf(w, "v%d", n)
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/a"), corralhttp.Miss, 200, "v1")
	expect(t, get(t, h, "/a"), corralhttp.Hit, 200, "v1")
	purge(t, h, corralhttp.Purge{Keys: []string{"k"}})
	expect(t, get(t, h, "/a"), corralhttp.Miss, 200, "v2")
	expect(t, get(t, h, "/a"), corralhttp.Hit, 200, "v2")
	if n := o.requests.Load(); n != 2 {
		t.Errorf("origin requests = %d, want 2", n)
	}
}

// A soft purge of a key: a response with a stale-while-revalidate window
// is answered STALE at once, by every request, while one revalidation is
// held at the origin; then the new answer is a HIT. A response without a
// window is gone, as after a hard purge.
func TestPurgeKeySoft(t *testing.T) {
	srv := redistest.Start(t)
	release := make(chan struct{})
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Surrogate-Key", "k")
		if r.URL.Path == "/swr" && n > 1 {
			<-release
		}
		if r.URL.Path == "/swr" {
			w.Header().Set("Cache-Control", "max-age=60, stale-while-revalidate=60")
		} else {
			w.Header().Set("Cache-Control", "max-age=60")
		}
		fmt.Fprintf(w, "%s v%d", r.URL.Path, n)
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/swr"), corralhttp.Miss, 200, "/swr v1")
	expect(t, get(t, h, "/plain"), corralhttp.Miss, 200, "/plain v2")
	purge(t, h, corralhttp.Purge{Keys: []string{"k"}, Soft: true})

	expect(t, get(t, h, "/swr"), corralhttp.Stale, 200, "/swr v1")
	eventually(t, "the revalidation at the origin", func() bool { return o.requests.Load() == 3 })
	parallel(20, func(int) {
		if w := get(t, h, "/swr"); w.Header().Get("X-Cache") != corralhttp.Stale || w.Body.String() != "/swr v1" {
			t.Errorf("GET /swr during the revalidation: %q %q, want STALE /swr v1", w.Header().Get("X-Cache"), w.Body.String())
		}
	})
	close(release)
	eventually(t, "the revalidated answer", func() bool { return get(t, h, "/swr").Header().Get("X-Cache") == corralhttp.Hit })
	if w := get(t, h, "/swr"); !strings.HasPrefix(w.Body.String(), "/swr v") || w.Body.String() == "/swr v1" {
		t.Errorf("GET /swr after the revalidation: %q, want a new body", w.Body.String())
	}

	w := get(t, h, "/plain") // no window: gone
	if w.Header().Get("X-Cache") != corralhttp.Miss || w.Body.String() == "/plain v2" {
		t.Errorf("GET /plain after a soft purge: %q %q, want a MISS with a new body", w.Header().Get("X-Cache"), w.Body.String())
	}
	if n := o.requests.Load(); n != 4 {
		t.Errorf("origin requests = %d, want 4 (two loads, one revalidation, one reload)", n)
	}
}

// A purge of a URL drops every stored thing of it: the entries of its
// forwarded headers' values, with Authorization, its Vary variant, its
// query (for a path without one), their second copies, and a pass
// marker; another URL stays. A purge of a URL with a query drops that
// URL alone.
func TestPurgeURLDropsEveryVariant(t *testing.T) {
	srv := redistest.Start(t)
	var conditional atomic.Int64
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if r.Header.Get("If-None-Match") != "" {
			conditional.Add(1)
		}
		w.Header().Set("ETag", fmt.Sprintf(`"%d"`, n)) // a second copy for each
		w.Header().Set("Vary", "X-Flavour")
		w.Header().Set("Cache-Control", "public, max-age=60")
		fmt.Fprintf(w, "v%d", n)
	})
	h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.ForwardHeaders = []string{"Accept-Language"} })
	variants := [][]string{
		{"/p"}, {"/p", "Accept-Language: en"}, {"/p", "Accept-Language: fr"}, {"/p", "Authorization: Bearer t"},
		{"/p", "X-Flavour: sweet"}, {"/p?q=1"}, {"/p?q=2", "Accept-Language: en"},
	}
	bodies := make([]string, len(variants))
	for i, v := range variants {
		bodies[i] = get(t, h, v[0], v[1:]...).Body.String()
		expect(t, get(t, h, v[0], v[1:]...), corralhttp.Hit, 200, bodies[i])
	}
	other := get(t, h, "/other").Body.String()

	purge(t, h, corralhttp.Purge{URLs: []string{"/p?q=1"}}) // that URL alone
	for i, v := range variants {
		want := corralhttp.Hit
		if v[0] == "/p?q=1" {
			want = corralhttp.Miss
		}
		if w := get(t, h, v[0], v[1:]...); w.Header().Get("X-Cache") != want {
			t.Errorf("GET %q after a purge of /p?q=1: X-Cache %q, want %s", v, w.Header().Get("X-Cache"), want)
		} else if want == corralhttp.Hit && w.Body.String() != bodies[i] {
			t.Errorf("GET %q after a purge of /p?q=1: %q, want %q", v, w.Body.String(), bodies[i])
		}
	}

	before := o.requests.Load()
	purge(t, h, corralhttp.Purge{URLs: []string{"/p"}})
	for i, v := range variants {
		w := get(t, h, v[0], v[1:]...)
		if w.Header().Get("X-Cache") != corralhttp.Miss || w.Body.String() == bodies[i] {
			t.Errorf("GET %q after a purge of /p: %q %q, want a MISS with a new body (was %q)", v, w.Header().Get("X-Cache"), w.Body.String(), bodies[i])
		}
	}
	if n := conditional.Load(); n != 0 {
		t.Errorf("%d conditional requests after the purge: a second copy was left", n)
	}
	if n := o.requests.Load() - before; n < int64(len(variants)) {
		t.Errorf("%d origin requests after the purge of /p, want at least %d", n, len(variants))
	}
	expect(t, get(t, h, "/other"), corralhttp.Hit, 200, other)
}

// A purge of a URL whose response may not be shared drops its pass
// marker: the next request tries the cache again, and its response, now
// shareable, is stored.
func TestPurgeURLDropsPassMarker(t *testing.T) {
	srv := redistest.Start(t)
	var shareable atomic.Bool
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		if shareable.Load() {
			w.Header().Set("Cache-Control", "max-age=60")
		} else {
			w.Header().Set("Cache-Control", "private")
		}
		fmt.Fprintf(w, "v%d", n)
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/u"), corralhttp.Miss, 200, "v1")
	expect(t, get(t, h, "/u"), corralhttp.Pass, 200, "v2")
	shareable.Store(true)
	expect(t, get(t, h, "/u"), corralhttp.Pass, 200, "v3") // the marker stands
	purge(t, h, corralhttp.Purge{URLs: []string{"/u"}})
	expect(t, get(t, h, "/u"), corralhttp.Miss, 200, "v4")
	expect(t, get(t, h, "/u"), corralhttp.Hit, 200, "v4")
}

// Two Handlers (two Caches, as two sidecars have) sharing a Redis: a
// purge through one is seen by the other, by key and by URL.
func TestPurgeAcrossHandlers(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Tag", "k")
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "v%d", n)
	})
	a, b := newHandler(t, srv, o, nil), newHandler(t, srv, o, nil)
	for i, p := range []corralhttp.Purge{{Keys: []string{"k"}}, {URLs: []string{"/x"}}} {
		from, to := a, b
		if i == 1 {
			from, to = b, a
		}
		old := get(t, from, "/x").Body.String()
		expect(t, get(t, to, "/x"), corralhttp.Hit, 200, old)
		purge(t, from, p)
		var now string
		eventually(t, "the other Handler to see the purge", func() bool {
			now = get(t, to, "/x").Body.String()
			return now != old
		})
		expect(t, get(t, from, "/x"), corralhttp.Hit, 200, now)
	}
	if n := o.requests.Load(); n != 3 {
		t.Errorf("origin requests = %d, want 3 (a load, a reload after each purge)", n)
	}
}

// PurgeAll drops everything the Handlers sharing the Prefix stored.
func TestPurgeAll(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, fixed("max-age=60", "body"))
	a, b := newHandler(t, srv, o, nil), newHandler(t, srv, o, nil)
	for _, path := range []string{"/1", "/2"} {
		expect(t, get(t, a, path), corralhttp.Miss, 200, "body")
	}
	purge(t, a, corralhttp.Purge{All: true})
	for _, path := range []string{"/1", "/2"} {
		eventually(t, "a MISS of "+path, func() bool { return get(t, b, path).Header().Get("X-Cache") == corralhttp.Miss })
	}
}

// A Purge that says nothing, or what cannot be done, is refused before
// anything is purged.
func TestPurgeInvalid(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Surrogate-Key", "k")
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "body")
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/p"), corralhttp.Miss, 200, "body")
	for _, tc := range []struct {
		p    corralhttp.Purge
		want string
	}{
		{corralhttp.Purge{}, "nothing to purge"},
		{corralhttp.Purge{Soft: true}, "nothing to purge"},
		{corralhttp.Purge{Keys: []string{"k", ""}}, "an empty key"},
		{corralhttp.Purge{Keys: []string{"k", "a b"}}, `key "a b" holds a space`},
		{corralhttp.Purge{Keys: []string{"a\x00b"}}, "holds a control character"},
		{corralhttp.Purge{Keys: []string{"k"}, URLs: []string{"p"}}, `"p": give the path`},
		{corralhttp.Purge{URLs: []string{"http://example.com/p"}}, "give the path"},
		{corralhttp.Purge{URLs: []string{""}}, "give the path"},
		{corralhttp.Purge{All: true, Keys: []string{"k"}}, "All purges everything"},
		{corralhttp.Purge{All: true, Soft: true}, "All is hard only"},
	} {
		err := h.Purge(context.Background(), tc.p)
		if !errors.Is(err, corralhttp.ErrInvalidPurge) || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "corralhttp: ") != 1 {
			t.Errorf("Purge(%+v) = %v, want ErrInvalidPurge saying %q", tc.p, err, tc.want)
		}
	}
	expect(t, get(t, h, "/p"), corralhttp.Hit, 200, "body")
}

// A 304 that names no surrogate key leaves the stored response's: a purge
// of its key after a revalidation still drops it, and its second copy.
func TestPurgeKeyAfterRevalidation(t *testing.T) {
	srv := redistest.Start(t)
	var conditional atomic.Int64
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Cache-Control", "max-age=1")
		w.Header().Set("ETag", `"e"`)
		if r.Header.Get("If-None-Match") == `"e"` {
			conditional.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Surrogate-Key", "k")
		fmt.Fprintf(w, "v%d", n)
	})
	h := newHandler(t, srv, o, nil)
	expect(t, get(t, h, "/r"), corralhttp.Miss, 200, "v1")
	eventually(t, "a revalidation refreshing the response", func() bool {
		w := get(t, h, "/r")
		noTags(t, "GET /r", w.Header())
		return strings.Contains(w.Header().Get("Cache-Status"), "fwd-status=304")
	})
	seen := conditional.Load()
	purge(t, h, corralhttp.Purge{Keys: []string{"k"}})
	w := get(t, h, "/r")
	if w.Header().Get("X-Cache") != corralhttp.Miss || w.Body.String() == "v1" || conditional.Load() != seen {
		t.Errorf("GET /r after a purge: %q %q, %d conditional requests; want a MISS with a new body, fetched whole",
			w.Header().Get("X-Cache"), w.Body.String(), conditional.Load()-seen)
	}
}

// A purge Redis cannot take is queued (Queued): the Handler that made it
// serves nothing it purged meanwhile, and once Redis answers again the
// purge lands, for the other Handlers too.
func TestPurgeQueued(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("Surrogate-Key", "k")
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "v%d", n)
	})
	near := newHandlerOn(t, proxyClient(t, proxy), o, func(o *corralhttp.Options) {
		o.Cache.RedisTimeout = 200 * time.Millisecond
	})
	far := newHandler(t, srv, o, nil)
	expect(t, get(t, far, "/q"), corralhttp.Miss, 200, "v1")
	expect(t, get(t, near, "/q"), corralhttp.Hit, 200, "v1")
	if err := proxy.Refuse(true); err != nil {
		t.Fatal(err)
	}
	err := near.Purge(context.Background(), corralhttp.Purge{Keys: []string{"k"}})
	if !corralhttp.Queued(err) {
		t.Fatalf("Purge with Redis refusing connections: %v; want an error saying it was queued", err)
	}
	if w := get(t, near, "/q"); w.Code != 200 || w.Body.String() == "v1" {
		t.Errorf("GET /q on the Handler that queued the purge: %d %q; want the origin's new answer", w.Code, w.Body.String())
	}
	expect(t, get(t, far, "/q"), corralhttp.Hit, 200, "v1") // Redis has not heard of it
	if err := proxy.Refuse(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the queued purge to land", func() bool { return get(t, far, "/q").Body.String() != "v1" })
	if corralhttp.Queued(nil) || corralhttp.Queued(errors.New("corral: Redis unreachable")) {
		t.Errorf("Queued of nil, or of another error: true")
	}
}

// commands counts the commands a Redis client sends (pipelines included).
type commands struct{ n *atomic.Int64 }

func (c commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// Every stored response carries its URL's tag, a long tail of tags: a HIT
// among 2,000 URLs asked in turn (each less often than every Coherence)
// reads no tag's record while no tag was purged since it was stored
// (corral's last tag invalidation), as many commands as a HIT of one URL;
// after a purge of another key, its tag's record is read too.
func TestPurgeURLTagsLongTail(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	o := startOrigin(t, fixed("max-age=600", "body"))
	rdb := srv.Client()
	var n atomic.Int64
	rdb.AddHook(commands{&n})
	h := newHandlerOn(t, rdb, o, nil)
	const urls = 2000
	for i := range urls {
		expect(t, get(t, h, fmt.Sprintf("/p/%d", i)), "MISS", http.StatusOK, "body")
	}
	expect(t, get(t, h, "/p/0"), "HIT", http.StatusOK, "body")
	before := n.Load()
	expect(t, get(t, h, "/p/0"), "HIT", http.StatusOK, "body")
	one := n.Load() - before // a HIT's commands, its tag's record fresh
	pass := func() float64 {
		before := n.Load()
		for i := range urls {
			expect(t, get(t, h, fmt.Sprintf("/p/%d", i)), "HIT", http.StatusOK, "body")
		}
		return float64(n.Load()-before) / urls
	}
	if got := pass(); got > float64(one)+0.2 {
		t.Fatalf("a HIT among %d URLs sent %.2f commands; one URL's sends %d: the tags' records were read", urls, got, one)
	} else {
		t.Logf("a HIT among %d URLs: %.2f commands (one URL's: %d)", urls, got, one)
	}
	purge(t, h, corralhttp.Purge{Keys: []string{"unrelated"}})
	if got := pass(); got < float64(one)+0.5 {
		t.Fatalf("after a purge, a HIT among %d URLs sent %.2f commands; want its tag's record read too (one URL's: %d)", urls, got, one)
	} else {
		t.Logf("after a purge of another key: %.2f commands a HIT", got)
	}
}
