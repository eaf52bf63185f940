// Command serveload is the load test of `corral serve`: `make serve-bench`
// runs it from the repository root, with a corral binary built for it.
//
// It starts, all on loopback: one HTTP origin that answers each request
// after -origin-latency with a body of -body bytes and Cache-Control
// max-age=-max-age; a private redis-server (internal/redistest); and
// -sidecars `corral serve` processes sharing it. Then -workers goroutines,
// each sending its next request as soon as the last is answered (a closed
// loop), run for -duration twice: first straight to the origin, then
// through the sidecars (round robin), starting with an empty cache. A
// request is for one of -hot hot URLs with probability -hot-share, else
// for a cold URL never asked before. Every answer's status and body are
// checked.
//
// It prints a Markdown table: requests, req/s, latency percentiles (an HDR
// histogram, github.com/HdrHistogram/hdrhistogram-go, 3 significant
// digits) and the origin's requests, per target; and the X-Cache values
// the sidecars answered with. The generator, origin, Redis and sidecars
// share the machine's CPUs: the numbers compare the two targets on one
// machine, they are not a sidecar's capacity.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/corralhq/corral/internal/redistest"
)

// config is the command line.
type config struct {
	bin           string
	sidecars      int
	workers       int
	duration      time.Duration
	originLatency time.Duration
	body          int
	maxAge        int
	hot           int
	hotShare      float64
}

func main() {
	var c config
	flag.StringVar(&c.bin, "bin", "", "the corral binary to run as `corral serve` (required)")
	flag.IntVar(&c.sidecars, "sidecars", 3, "corral serve processes sharing the Redis")
	flag.IntVar(&c.workers, "workers", 64, "concurrent clients, each in a closed loop")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long each target is loaded")
	flag.DurationVar(&c.originLatency, "origin-latency", 50*time.Millisecond, "the origin's latency per request")
	flag.IntVar(&c.body, "body", 4<<10, "response body size, in bytes")
	flag.IntVar(&c.maxAge, "max-age", 60, "the origin's Cache-Control max-age, in seconds")
	flag.IntVar(&c.hot, "hot", 20, "hot URLs")
	flag.Float64Var(&c.hotShare, "hot-share", 0.9, "share of requests for a hot URL; the rest are for cold URLs, each asked once")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "serveload:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.bin == "" {
		return errors.New("-bin is required (make serve-bench builds it)")
	}
	if c.sidecars < 1 || c.workers < 1 || c.duration <= 0 || c.hot < 1 || c.hotShare < 0 || c.hotShare > 1 {
		return errors.New("-sidecars, -workers, -duration and -hot must be positive, -hot-share in [0, 1]")
	}
	dir, err := os.MkdirTemp("", "serveload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rs, err := redistest.Run(dir)
	if err != nil {
		return err
	}
	defer rs.Close()
	org, err := startOrigin(c)
	if err != nil {
		return err
	}
	defer org.srv.Close()

	var sidecars []*sidecar
	defer func() {
		for _, s := range sidecars {
			s.stop()
		}
	}()
	for range c.sidecars {
		s, err := startSidecar(c.bin, "--origin", org.url, "--redis", rs.URL())
		if err != nil {
			return err
		}
		sidecars = append(sidecars, s)
	}

	direct := load(c, org, []string{org.url}, "origin directly")
	var urls []string
	for _, s := range sidecars {
		urls = append(urls, s.url)
	}
	through := load(c, org, urls, fmt.Sprintf("%d corral serve sidecars", c.sidecars))
	for _, s := range sidecars {
		if err := s.stop(); err != nil {
			return err
		}
	}
	sidecars = nil
	report(os.Stdout, c, []result{direct, through})
	return nil
}

// origin is the loopback origin; it counts its requests.
type origin struct {
	srv      *http.Server
	url      string
	requests atomic.Int64
	body     []byte // the body's bytes after its first line, the path
}

func startOrigin(c config) (*origin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &origin{url: "http://" + ln.Addr().String(), body: bytes.Repeat([]byte("x"), c.body)}
	cc := "max-age=" + strconv.Itoa(c.maxAge)
	o.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		time.Sleep(c.originLatency) // the origin's work: its latency is what is measured against
		w.Header().Set("Cache-Control", cc)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, r.URL.Path)
		_, _ = w.Write(o.body[:max(0, c.body-len(r.URL.Path)-1)])
	})}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

// result is one target's run.
type result struct {
	name     string
	requests int64
	errors   int64
	firstErr string
	elapsed  time.Duration
	hist     *hdrhistogram.Histogram // microseconds
	origin   int64                   // the origin's requests during the run
	xcache   map[string]int64
}

// load runs c.workers closed-loop clients against targets for c.duration.
func load(c config, org *origin, targets []string, name string) result {
	tr := &http.Transport{MaxIdleConnsPerHost: c.workers, MaxIdleConns: c.workers * len(targets), DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	res := result{name: name, hist: hdrhistogram.New(1, 60_000_000, 3), xcache: map[string]int64{}}
	var mu sync.Mutex // guards res
	before := org.requests.Load()
	start := time.Now()
	deadline := start.Add(c.duration)
	var wg sync.WaitGroup
	for w := range c.workers {
		wg.Go(func() {
			hist := hdrhistogram.New(1, 60_000_000, 3)
			xc := map[string]int64{}
			var n, errs int64
			var firstErr string
			for i := 0; time.Now().Before(deadline); i++ {
				path := fmt.Sprintf("/cold/%d/%d", w, i)
				if rand.Float64() < c.hotShare {
					path = fmt.Sprintf("/hot/%d", rand.IntN(c.hot))
				}
				t0 := time.Now()
				x, err := get(client, targets[(w+i)%len(targets)]+path, path, c.body)
				_ = hist.RecordValue(time.Since(t0).Microseconds())
				n++
				if err != nil {
					errs++
					if firstErr == "" {
						firstErr = err.Error()
					}
				}
				xc[x]++
			}
			mu.Lock()
			defer mu.Unlock()
			res.hist.Merge(hist)
			res.requests += n
			res.errors += errs
			if res.firstErr == "" {
				res.firstErr = firstErr
			}
			for k, v := range xc {
				res.xcache[k] += v
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.origin = org.requests.Load() - before
	return res
}

// get GETs url and checks the answer: 200, a body of size bytes starting
// with path. It returns the X-Cache header.
func get(c *http.Client, url, path string, size int) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	x := resp.Header.Get("X-Cache")
	switch {
	case err != nil:
		return x, err
	case resp.StatusCode != http.StatusOK:
		return x, fmt.Errorf("GET %s: %s", path, resp.Status)
	case len(body) != max(size, len(path)+1) || !bytes.HasPrefix(body, []byte(path+"\n")):
		return x, fmt.Errorf("GET %s: a wrong body (%d bytes)", path, len(body))
	}
	return x, nil
}

// report prints the results as Markdown.
func report(w io.Writer, c config, rs []result) {
	fmt.Fprintf(w, "%d closed-loop clients for %v per target; origin latency %v, %d-byte bodies, max-age=%d; "+
		"%.0f%% of requests for %d hot URLs, the rest for cold URLs asked once; GOMAXPROCS %d, %d CPUs shared by all.\n\n",
		c.workers, c.duration, c.originLatency, c.body, c.maxAge, c.hotShare*100, c.hot, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintln(w, "| Target | Requests | req/s | p50 | p90 | p99 | max | Origin requests | Errors |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rs {
		ms := func(q float64) string { return fmt.Sprintf("%.1f ms", float64(r.hist.ValueAtQuantile(q))/1000) }
		fmt.Fprintf(w, "| %s | %d | %.0f | %s | %s | %s | %.1f ms | %d | %d |\n", r.name, r.requests,
			float64(r.requests)/r.elapsed.Seconds(), ms(50), ms(90), ms(99), float64(r.hist.Max())/1000, r.origin, r.errors)
	}
	for _, r := range rs {
		if r.firstErr != "" {
			fmt.Fprintf(w, "\n%s: first error: %s\n", r.name, r.firstErr)
		}
		if len(r.xcache) > 1 || r.xcache[""] == 0 {
			var parts []string
			for k, v := range r.xcache {
				parts = append(parts, fmt.Sprintf("%s %d", k, v))
			}
			sort.Strings(parts)
			fmt.Fprintf(w, "\nX-Cache through %s: %s\n", r.name, strings.Join(parts, ", "))
		}
	}
}

// sidecar is one `corral serve` process.
type sidecar struct {
	url    string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	stderr bytes.Buffer // guarded by exited: read after it is closed
}

var listenLine = regexp.MustCompile(`msg="corral serve: listening" listen=(\S+)`)

// startSidecar starts `bin serve --listen 127.0.0.1:0 args...` and returns
// once its /healthz answers.
func startSidecar(bin string, args ...string) (*sidecar, error) {
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &sidecar{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil && len(addr) == 0 {
				addr <- m[1]
			}
			s.stderr.Write(append(sc.Bytes(), '\n'))
		}
		s.err = cmd.Wait()
		close(s.exited)
	}()
	select {
	case a := <-addr:
		s.url = "http://" + a
	case <-s.exited:
		return nil, fmt.Errorf("corral serve exited at start: %v\n%s", s.err, &s.stderr)
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, errors.New("corral serve did not start within 30s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := http.Get(s.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			s.stop()
			return nil, errors.New("corral serve's /healthz did not answer 200 within 30s")
		}
	}
}

// stop sends SIGTERM and waits for the exit; an exit status other than 0
// is an error.
func (s *sidecar) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if s.err != nil {
		return fmt.Errorf("corral serve: %v\n%s", s.err, &s.stderr)
	}
	return nil
}
