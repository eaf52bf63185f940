package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
)

// Purging: POST /purge on a sidecar's --admin-listen, and `corral purge`,
// each the built binary in front of a counting origin, on a real
// redis-server.

// taggedOrigin starts an origin whose responses to GET path are fresh for
// a minute, then stale for another while revalidated, numbered ("/a v3"),
// with the surrogate keys "all" and "key" plus the path ("key/a"). Its
// /purge answers 404: a purge sent to --listen reaches it.
func taggedOrigin(t *testing.T) *origin {
	var n atomic.Int64
	return startOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/purge" {
			http.Error(w, "the origin's /purge", http.StatusNotFound)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60, stale-while-revalidate=60")
		w.Header().Set("Surrogate-Key", "all key"+r.URL.Path)
		fmt.Fprintf(w, "%s v%d", r.URL.Path, n.Add(1))
	})
}

// cached GETs url and returns what it got, failing t on an error or a
// status other than 200, or if the origin's surrogate keys reach it.
func cached(t *testing.T, url string) response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %q, %v", url, resp.StatusCode, body, err)
	}
	if v := resp.Header.Values("Surrogate-Key"); len(v) > 0 {
		t.Errorf("GET %s: Surrogate-Key %q reaches the client", url, v)
	}
	return response{code: resp.StatusCode, xcache: resp.Header.Get("X-Cache"), body: string(body)}
}

// answer is /purge's JSON answer, as a client reads it.
type answer struct {
	code   int
	Status string   `json:"status"`
	Keys   []string `json:"keys"`
	URLs   []string `json:"urls"`
	All    bool     `json:"all"`
	Soft   bool     `json:"soft"`
	Error  string   `json:"error"`
}

// post POSTs to url, with a form body when form is not empty, and reads
// the answer, JSON when it says so.
func post(t *testing.T, url, form string) answer {
	t.Helper()
	resp, err := http.Post(url, "application/x-www-form-urlencoded", strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{code: resp.StatusCode}
	if resp.Header.Get("Content-Type") == "application/json" {
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
	}
	return a
}

// POST /purge on --admin-listen purges by surrogate key, by URL, softly,
// and everything, for every sidecar of the fleet; it refuses other methods
// (405) and bad requests (400, nothing purged). On --listen /purge is the
// origin's: a POST there purges nothing.
func TestServePurge(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	org := taggedOrigin(t)
	fleet := startFleet(t, 2, nil, "--origin", org.URL, "--redis", srv.URL(), "--admin-listen", "127.0.0.1:0")
	a, b := fleet[0], fleet[1]
	hitOn := func(s *sidecar, path string) string {
		t.Helper()
		first := cached(t, s.URL+path)
		if r := cached(t, s.URL+path); r.xcache != "HIT" || r.body != first.body {
			t.Fatalf("GET %s again: %+v; want a HIT of %q", path, r, first.body)
		}
		return first.body
	}
	missOn := func(s *sidecar, path, old string) {
		t.Helper()
		waitFor(t, waitBound, path+" purged", func() bool { // the other sidecar: within 100 ms
			r := cached(t, s.URL+path)
			if r.body != old && r.xcache != "MISS" && r.xcache != "COALESCED" {
				t.Fatalf("GET %s after a purge: %+v; want a MISS", path, r)
			}
			return r.body != old
		})
	}

	old, other := hitOn(a, "/x"), hitOn(a, "/y")
	if got := post(t, a.Admin+"/purge?key=key/x", ""); got.code != http.StatusOK || got.Status != "purged" || len(got.Keys) != 1 {
		t.Fatalf("POST /purge?key=key/x: %+v; want 200 purged", got)
	}
	missOn(b, "/x", old)
	if r := cached(t, b.URL+"/y"); r.xcache != "HIT" || r.body != other {
		t.Errorf("GET /y after a purge of /x's key: %+v; want a HIT of %q", r, other)
	}

	old = hitOn(b, "/x?q=1")
	if got := post(t, b.Admin+"/purge", "url=/x"); got.code != http.StatusOK || len(got.URLs) != 1 { // every query of /x
		t.Fatalf("POST /purge url=/x: %+v; want 200", got)
	}
	missOn(a, "/x?q=1", old)

	old = hitOn(a, "/x")
	if got := post(t, a.Admin+"/purge?key=key/x&soft=1", ""); got.code != http.StatusOK || !got.Soft {
		t.Fatalf("POST /purge?key=key/x&soft=1: %+v; want 200, soft", got)
	}
	waitFor(t, waitBound, "a STALE answer, then the new body", func() bool {
		r := cached(t, b.URL+"/x")
		if r.body == old && r.xcache != "STALE" && r.xcache != "HIT" {
			t.Fatalf("GET /x after a soft purge: %+v; want STALE (or HIT until b hears of it), then the new body", r)
		}
		return r.body != old
	})

	old = hitOn(a, "/y")
	if r := fetchPost(t, a.URL+"/purge?key=all"); r.code != http.StatusNotFound || r.body != "the origin's /purge\n" {
		t.Errorf("POST /purge on --listen: %+v; want the origin's 404", r)
	}
	if r := cached(t, b.URL+"/y"); r.xcache != "HIT" || r.body != old {
		t.Errorf("GET /y after a POST /purge on --listen: %+v; want a HIT of %q", r, old)
	}
	if got := post(t, b.Admin+"/purge?all=1", ""); got.code != http.StatusOK || !got.All {
		t.Fatalf("POST /purge?all=1: %+v; want 200", got)
	}
	missOn(a, "/y", old)

	for _, bad := range []string{"", "key=", "url=products", "bogus=1", "all=1&soft=1", "all=1&key=k", "soft=yes&key=k", "key=a%20b", "key=a%00b"} {
		if got := post(t, a.Admin+"/purge?"+bad, ""); got.code != http.StatusBadRequest || got.Status != "invalid" || got.Error == "" {
			t.Errorf("POST /purge?%s: %+v; want 400 invalid, saying why", bad, got)
		}
	}
	// The errors name the request's parameters, not corralhttp.Purge's fields.
	for bad, want := range map[string]string{"all=1&soft=1": "all=1 is hard only", "all=1&key=k": "all=1 purges everything: give it without key= or url="} {
		if got := post(t, a.Admin+"/purge?"+bad, ""); !strings.Contains(got.Error, want) {
			t.Errorf("POST /purge?%s: error %q; want it to say %q", bad, got.Error, want)
		}
	}
	resp, err := http.Get(a.Admin + "/purge?key=all")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /purge: %d, Allow %q; want 405, POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if r := cached(t, a.URL+"/y"); r.xcache != "HIT" {
		t.Errorf("GET /y after bad purges: %+v; want a HIT", r)
	}
}

// fetchPost POSTs to url with no body and returns what it got.
func fetchPost(t *testing.T, url string) response {
	t.Helper()
	resp, err := http.Post(url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, xcache: resp.Header.Get("X-Cache"), body: string(body), err: err}
}

// runPurge runs the built `corral purge` with args and env, and returns
// its stdout, stderr and exit status.
func runPurgeCmd(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(corralBinary(t), append([]string{"purge"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// `corral purge` against the sidecars' Redis removes what they stored: by
// URL, by surrogate key (--tag), softly, everything, and a cache key the
// library stored; only under the prefix it is given.
func TestPurgeCommand(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	org := taggedOrigin(t)
	s := startSidecar(t, nil, "--origin", org.URL, "--redis", srv.URL())
	redisEnv := []string{"CORRAL_PURGE_REDIS=" + srv.URL()}
	stored := func(path string) string {
		t.Helper()
		first := cached(t, s.URL+path)
		if r := cached(t, s.URL+path); r.xcache != "HIT" {
			t.Fatalf("GET %s again: %+v; want a HIT", path, r)
		}
		return first.body
	}
	// The sidecar hears of a purge by another process within 100 ms: a
	// HIT of the old body until then, then a MISS of a new one (a hard
	// purge) or STALE of the old (a soft one).
	purged := func(path, old, xcache string) {
		t.Helper()
		waitFor(t, waitBound, path+" purged", func() bool {
			r := cached(t, s.URL+path)
			switch {
			case r.xcache == "HIT" && r.body == old:
				return false
			case r.xcache != xcache || (xcache == "MISS") == (r.body == old):
				t.Fatalf("GET %s after corral purge: %+v; want %s (was %q)", path, r, xcache, old)
			}
			return true
		})
	}
	ok := func(want string, args ...string) {
		t.Helper()
		out, errOut, code := runPurgeCmd(t, redisEnv, args...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("corral purge %s: exit %d, %q %q; want exit 0 saying %q", strings.Join(args, " "), code, out, errOut, want)
		}
	}

	a, b, c := stored("/a"), stored("/b?q=1"), stored("/c")
	ok(`purged 1 URL under prefix "corral" (hard)`, "--url", "/a")
	purged("/a", a, "MISS")
	if r := cached(t, s.URL+"/b?q=1"); r.xcache != "HIT" || r.body != b {
		t.Errorf("GET /b?q=1 after a purge of /a: %+v; want a HIT", r)
	}
	ok(`purged 2 tags under prefix "corral" (hard)`, "--tag", "key/b", "--tag", "none")
	purged("/b?q=1", b, "MISS")
	b = stored("/b?q=1")
	ok("(hard)", "--prefix", "other", "--tag", "all") // another prefix: nothing of the sidecar's
	ok("(hard)", "--tag", "key/b")                    // once the sidecar has heard of this one,
	purged("/b?q=1", b, "MISS")
	if r := cached(t, s.URL+"/c"); r.xcache != "HIT" || r.body != c { // it has of the one before
		t.Errorf("GET /c after a purge under another prefix: %+v; want a HIT", r)
	}
	ok(`purged 1 URL under prefix "corral" (soft)`, "--url", "/c", "--soft")
	purged("/c", c, "STALE")
	c = stored("/c?new")
	ok(`purged everything under prefix "corral"`, "--all")
	purged("/c?new", c, "MISS")

	rdb := srv.Client()
	defer rdb.Close()
	cache, err := core.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	ctx := context.Background()
	if err := cache.Set(ctx, "user:1", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	ok(`purged 1 key under prefix "corral" (hard)`, "--key", "user:1")
	if _, err := cache.Get(ctx, "user:1"); !errors.Is(err, core.ErrMiss) {
		t.Errorf("Get after corral purge --key: %v; want ErrMiss", err)
	}
}

// corral purge --all deletes the cleared entries before it exits, with no
// Cache of the prefix running to sweep them: a Redis under noeviction is
// not left holding them until their TTL.
func TestPurgeAllSweeps(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	defer rdb.Close()
	ctx := context.Background()
	for _, prefix := range []string{"corral", "corral:e"} {
		cache, err := core.New(rdb, &core.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			if err := cache.Set(ctx, fmt.Sprint("user:", i), []byte("v"), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		cache.Close()
	}
	count := func(pattern string) int {
		keys, err := rdb.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	out, errOut, code := runPurgeCmd(t, []string{"CORRAL_PURGE_REDIS=" + srv.URL()}, "--all")
	// The Cache that applies the Clear may begin the sweep itself, in the
	// background, before its Close cuts it short (another takes it up: the
	// command's own sweep). The command then says how many it deleted:
	// 200, or fewer, the rest deleted by its Cache. None is left (below).
	var deleted int
	i := strings.Index(out, "deleted ")
	if code != 0 || i < 0 {
		t.Fatalf("corral purge --all: exit %d, %q %q; want exit 0, and how many cleared entries it deleted", code, out, errOut)
	}
	if _, err := fmt.Sscanf(out[i:], "deleted %d cleared entries", &deleted); err != nil || deleted < 0 || deleted > 200 {
		t.Fatalf("corral purge --all: %q; want deleted at most 200 cleared entries", out)
	}
	if n := count("corral:e:{*"); n != 0 {
		t.Fatalf("%d of the cleared entries left as corral purge --all exited; want none", n)
	}
	if n := count("corral:e:e:{*"); n != 200 {
		t.Fatalf("prefix corral:e has %d entries left of 200; a purge of corral must leave them", n)
	}
}

// corral purge refuses a bad command line (exit 2) before purging, and
// fails (exit 1) when Redis does not take the purge, saying why, corral:
// once per line; the password is never shown.
func TestPurgeCommandErrors(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	closed := "redis://:pw-secret@" + closedAddr(t)
	for _, tc := range []struct {
		args []string
		env  []string
		code int
		want string
	}{
		{[]string{"--tag", "t"}, nil, 2, "corral: purge: --redis is required (or CORRAL_PURGE_REDIS)"},
		{[]string{"--redis", srv.URL()}, nil, 2, "nothing to purge: give --key, --tag, --url or --all"},
		{[]string{"--redis", srv.URL(), "--all", "--tag", "t"}, nil, 2, "--all purges everything"},
		{[]string{"--redis", srv.URL(), "--all", "--soft"}, nil, 2, "--all is hard only"},
		{[]string{"--redis", srv.URL(), "--tag", ""}, nil, 2, "--tag must not be empty"},
		{[]string{"--redis", srv.URL(), "--url", "products/42"}, nil, 2, `--url: invalid URL to purge: "products/42": give the path`},
		{[]string{"--redis", "127.0.0.1:6379", "--all"}, nil, 2, "write redis://127.0.0.1:6379"},
		{[]string{"--all"}, []string{"CORRAL_PURGE_REDIS=" + srv.URL(), "CORRAL_PURGE_BOGUS=1"}, 2, "corral: purge: CORRAL_PURGE_BOGUS is set, but no flag of corral purge"},
		{[]string{"--redis", srv.URL(), "--prefix", "a{b", "--all"}, nil, 2, "purge: invalid options: Prefix"},
		{[]string{"--tag", "t", "--url", "/p"}, []string{"CORRAL_PURGE_REDIS=" + closed}, 1, "corral: purge: --tag and --url: "},
		{[]string{"--key", "k"}, []string{"CORRAL_PURGE_REDIS=" + closed}, 1, `corral: purge: --key "k": `},
		{[]string{"--all"}, []string{"CORRAL_PURGE_REDIS=" + closed}, 1, "corral: what was queued is lost as corral purge exits: run it again"},
	} {
		what := "corral purge " + strings.Join(tc.args, " ")
		out, errOut, code := runPurgeCmd(t, tc.env, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d saying %q", what, code, errOut, tc.code, tc.want)
		}
		if out != "" {
			t.Errorf("%s: stdout %q, want none", what, out)
		}
		sayOncePerLine(t, what, errOut)
		mustNotContain(t, what, errOut, "pw-secret")
	}
}

// corral purge --help says what each flag purges, and the default prefix.
func TestPurgeHelp(t *testing.T) {
	t.Parallel()
	out, _, err := corral(t, "purge", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--redis string", "--prefix string", `(default "corral")`, "--key stringArray",
		"--tag stringArray", "--url stringArray", "--all", "--soft", "--timeout duration", "(default 10s)",
		"corral serve's and the library's", "CORRAL_PURGE_REDIS", "Exit status: 0", "Surrogate-Key",
		"without a query, every query"} {
		if !strings.Contains(out, want) {
			t.Errorf("purge --help lacks %q:\n%s", want, out)
		}
	}
}

// unapplied forgives the errors of invalidations the Cache queued when its
// Close applied them all, and no other.
func TestPurgeUnapplied(t *testing.T) {
	queued := fmt.Errorf("corral: Redis unreachable (%w)", core.ErrQueued)
	denied := errors.New("corral: permission denied by Redis ACL")
	for _, tc := range []struct {
		errs    []error
		dropped bool
		want    string // "" for none
	}{
		{nil, false, ""},
		{[]error{queued, queued}, false, ""},
		{[]error{queued}, true, "is lost as corral purge exits"},
		{[]error{queued, denied}, false, "permission denied"},
		{[]error{denied}, false, "permission denied"},
	} {
		err := unapplied(tc.errs, tc.dropped)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("unapplied(%v, dropped %v) = %v, want %q", tc.errs, tc.dropped, err, tc.want)
		}
	}
}

// With Redis gone, POST /purge answers 202: queued, the sidecar applies
// it once Redis answers; the JSON says why.
func TestServePurgeQueued(t *testing.T) {
	t.Parallel()
	org := taggedOrigin(t)
	s := startSidecar(t, nil, "--origin", org.URL, "--redis", "redis://"+closedAddr(t), "--admin-listen", "127.0.0.1:0",
		"--redis-timeout", "200ms")
	got := post(t, s.Admin+"/purge?key=k&url=/x", "")
	if got.code != http.StatusAccepted || got.Status != "queued" || !strings.Contains(got.Error, "queued") {
		t.Errorf("POST /purge with Redis gone: %+v; want 202 queued, saying why", got)
	}
}
