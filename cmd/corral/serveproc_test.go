package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
)

// The process tests of `corral serve` run the corral binary, built once per
// test run (with -race when the tests have it), as separate processes.

// binary is the corral binary the tests start.
var binary struct {
	once sync.Once
	dir  string // removed by TestMain
	path string
	err  error
}

// corralBinary builds the corral binary once and returns its path.
func corralBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		if binary.dir, binary.err = os.MkdirTemp("", "corral-serve-test-"); binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "corral")
		args := []string{"build", "-o", binary.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// removeBinary runs the tests, then removes the binary they built.
type removeBinary struct{ m *testing.M }

func (r removeBinary) Run() int {
	code := r.m.Run()
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
	return code
}

// Bounds of the process tests: generous, for a busy 2-core machine running
// race-detector binaries.
const (
	startBound = 60 * time.Second // a sidecar's start, until /healthz answers
	stopBound  = 30 * time.Second // a sidecar's exit after SIGTERM
	waitBound  = 30 * time.Second // any other condition polled for
)

// sidecar is one `corral serve` process.
type sidecar struct {
	URL   string // http://host:port of --listen
	Admin string // of /metrics and /healthz

	cmd    *exec.Cmd
	out    *testkit.Buffer // stdout and stderr
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed

	wantStatus int         // the exit status stop expects; set before stop
	terminated atomic.Bool // SIGTERM was sent: stop waits, it does not send another
}

// listenLine is the log line of a sidecar that listens.
var listenLine = regexp.MustCompile(`msg="corral serve: listening" listen=(\S+) admin=(\S+)`)

// startSidecar starts `corral serve --listen 127.0.0.1:0` with args and
// the environment variables env, and returns once its /healthz answers
// 200. When the test ends, it is sent SIGTERM and must exit with status 0
// (a race found in it makes it exit 66); its output is logged if the test
// failed.
func startSidecar(t *testing.T, env []string, args ...string) *sidecar {
	t.Helper()
	cmd := exec.Command(corralBinary(t), append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	s := &sidecar{cmd: cmd, out: &testkit.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout = s.out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.out.Write(append(sc.Bytes(), '\n'))
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil && len(addrs) == 0 {
				addrs <- m[1:]
			}
		}
		_, _ = io.Copy(s.out, stderr)
		s.err = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("sidecar %s: %v", s.URL, err)
		}
		if t.Failed() {
			t.Logf("sidecar %s output:\n%s", s.URL, s.out)
		}
	})
	select {
	case a := <-addrs:
		s.URL, s.Admin = "http://"+a[0], "http://"+a[1]
	case <-s.exited:
		t.Fatalf("corral serve exited at start: %v\n%s", s.err, s.out)
	case <-time.After(startBound):
		t.Fatalf("corral serve did not say it listens within %v:\n%s", startBound, s.out)
	}
	waitFor(t, startBound, "sidecar's /healthz to answer 200", func() bool {
		code, _, err := get(s.Admin + "/healthz")
		return err == nil && code == http.StatusOK
	})
	return s
}

// signal sends sig to the sidecar.
func (s *sidecar) signal(sig os.Signal) error {
	if sig == syscall.SIGTERM {
		s.terminated.Store(true)
	}
	return s.cmd.Process.Signal(sig)
}

// stop sends SIGTERM unless the sidecar has exited or was sent one, waits
// for its exit and returns an error unless it exited with status
// wantStatus. A second SIGTERM could reach a sidecar that has finished its
// shutdown and restored the default handler: killed, not exited.
func (s *sidecar) stop() error {
	select {
	case <-s.exited:
	default:
		if !s.terminated.Load() {
			_ = s.signal(syscall.SIGTERM)
		}
	}
	select {
	case <-s.exited:
	case <-time.After(stopBound):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("no exit within %v of SIGTERM: killed", stopBound)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != s.wantStatus {
		return fmt.Errorf("exit status %d (%v), want %d", code, s.err, s.wantStatus)
	}
	return nil
}

// startFleet starts n sidecars with the same arguments.
func startFleet(t *testing.T, n int, env []string, args ...string) []*sidecar {
	t.Helper()
	fleet := make([]*sidecar, n)
	for i := range fleet {
		fleet[i] = startSidecar(t, env, args...)
	}
	return fleet
}

// origin is an HTTP origin that counts the requests it gets, per path.
type origin struct {
	*httptest.Server
	mu    sync.Mutex // guards count
	count map[string]int
}

// startOrigin starts an origin answering with h, closed when the test ends
// (after the sidecars started later have stopped).
func startOrigin(t *testing.T, h http.HandlerFunc) *origin {
	o := &origin{count: make(map[string]int)}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.count[r.URL.Path]++
		o.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

// requests returns how many requests for path the origin got.
func (o *origin) requests(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count[path]
}

// gate holds requests until opened.
type gate struct {
	once sync.Once
	c    chan struct{}
}

func newGate() *gate { return &gate{c: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.c) }) }

// wait waits until g is open or r is cancelled.
func (g *gate) wait(r *http.Request) {
	select {
	case <-g.c:
	case <-r.Context().Done():
	}
}

// response is what a client got.
type response struct {
	code   int
	xcache string
	body   string
	err    error
}

// client returns an HTTP client for many concurrent requests, its idle
// connections closed when the test ends.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitBound}
}

// fetch GETs url with c; wrote, if not nil, is called once the request
// is written.
func fetch(c *http.Client, url string, wrote func()) response {
	ctx := context.Background()
	if wrote != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { wrote() },
		})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return response{err: err}
	}
	resp, err := c.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, xcache: resp.Header.Get("X-Cache"), body: string(body), err: err}
}

// get GETs url with a new connection and returns the status and body.
func get(url string) (int, string, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	r := fetch(&http.Client{Transport: tr, Timeout: 5 * time.Second}, url, nil)
	return r.code, r.body, r.err
}

// waitFor polls cond every 10ms until it holds, failing t after bound.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.EventuallyEvery(t, bound, 10*time.Millisecond, what, cond)
}

// closedAddr returns a loopback address that refuses connections
// (testkit.RefusingAddr).
func closedAddr(t *testing.T) string { return testkit.RefusingAddr(t) }

// concurrently GETs url(i) for i in [0, n) at once with c, each request
// written before the gate g is opened (so all n are under way when the
// origin answers), and returns the responses. It fails t if the requests
// are not all written within waitBound (and opens g anyway).
func concurrently(t *testing.T, c *http.Client, n int, g *gate, url func(i int) string) []response {
	t.Helper()
	var wrote, done sync.WaitGroup
	wrote.Add(n)
	done.Add(n)
	out := make([]response, n)
	for i := range n {
		go func() {
			defer done.Done()
			w := sync.OnceFunc(wrote.Done)
			out[i] = fetch(c, url(i), w)
			w() // a request that failed before it was written
		}()
	}
	allWritten := make(chan struct{})
	go func() { wrote.Wait(); close(allWritten) }()
	select {
	case <-allWritten:
	case <-time.After(waitBound):
		t.Errorf("%d requests not all written within %v", n, waitBound)
	}
	g.open()
	done.Wait()
	return out
}

// errorsIn returns the first failed responses' errors, joined.
func errorsIn(rs []response) error {
	var errs []error
	for _, r := range rs {
		if r.err != nil && len(errs) < 3 {
			errs = append(errs, r.err)
		}
	}
	return errors.Join(errs...)
}

// mustNotContain fails t if s holds any of secrets.
func mustNotContain(t *testing.T, what, s string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			t.Errorf("%s shows the secret %q:\n%s", what, sec, s)
		}
	}
}
