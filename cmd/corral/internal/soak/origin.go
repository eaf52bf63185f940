package soak

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// origin is the slow source every worker reads through its cache: a small
// HTTP server on loopback in the orchestrator, so it outlives workers and
// Redis restarts. It holds a version counter per key, answers
// GET /k/<key> with the key's version (read when the request arrives, as a
// database query reads its snapshot) after the origin latency, and records
// every load: who made it, when, and what it answered.
type origin struct {
	epoch   time.Time
	latency time.Duration
	srv     *http.Server
	ln      net.Listener
	served  chan error // Serve's result
	closed  sync.Once

	mu       sync.Mutex // guards versions and loads
	versions []int64
	loads    []Load
}

// payload pads every value, so values are not trivially small.
var payload = strings.Repeat("x", 200)

func startOrigin(epoch time.Time, keys int, latency time.Duration) (*origin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("soak: origin: %w", err)
	}
	o := &origin{epoch: epoch, latency: latency, ln: ln, served: make(chan error, 1), versions: make([]int64, keys)}
	for i := range o.versions {
		o.versions[i] = 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /k/{key}", o.serveKey)
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { o.served <- o.srv.Serve(ln) }()
	return o, nil
}

// URL is the origin's base URL.
func (o *origin) URL() string { return "http://" + o.ln.Addr().String() }

// since is the time since the epoch.
func (o *origin) since() time.Duration { return time.Since(o.epoch) }

// serveKey answers GET /k/<key>?w=<worker>&t=<loader start, ns since
// epoch>&fo=<1 for a fail-open load>&tr=<1 if the worker had seen Redis
// trouble> (Load's FailOpen and Troubled).
func (o *origin) serveKey(w http.ResponseWriter, r *http.Request) {
	arrive := o.since()
	key, err := strconv.Atoi(r.PathValue("key"))
	q := r.URL.Query()
	worker, err2 := strconv.Atoi(q.Get("w"))
	start, err3 := strconv.ParseInt(q.Get("t"), 10, 64)
	if err := errors.Join(err, err2, err3); err != nil || key < 0 || key >= len(o.versions) {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	v := o.versions[key]
	o.mu.Unlock()
	cut := false
	if o.latency > 0 {
		t := time.NewTimer(o.latency)
		select {
		case <-t.C:
		case <-r.Context().Done(): // the worker was killed, or gave up
			cut = true
		}
		t.Stop()
	}
	o.mu.Lock()
	o.loads = append(o.loads, Load{Key: key, Worker: worker, Start: time.Duration(start), Arrive: arrive,
		End: o.since(), Version: v, FailOpen: q.Get("fo") == "1", Troubled: q.Get("tr") == "1", Cut: cut})
	o.mu.Unlock()
	fmt.Fprint(w, formatValue(key, v))
}

// bump raises key's version and returns the new one.
func (o *origin) bump(key int) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.versions[key]++
	return o.versions[key]
}

// close stops the server (once) and returns its loads.
func (o *origin) close() []Load {
	o.closed.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.srv.Shutdown(ctx); err != nil {
			_ = o.srv.Close()
		}
		<-o.served
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.loads
}

// formatValue is the origin's answer for key at version v:
// "k<key> <version> <payload>".
func formatValue(key int, v int64) string {
	return "k" + strconv.Itoa(key) + " " + strconv.FormatInt(v, 10) + " " + payload
}

// parseValue returns the version in a value of key, or an error when the
// value is not one of key's.
func parseValue(key int, b []byte) (int64, error) {
	s := string(b)
	name, rest, ok := strings.Cut(s, " ")
	if !ok || name != "k"+strconv.Itoa(key) {
		return 0, fmt.Errorf("value %.40q is not one of k%d's", s, key)
	}
	vs, _, _ := strings.Cut(rest, " ")
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("value %.40q has no version", s)
	}
	return v, nil
}
