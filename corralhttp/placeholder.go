// Package corralhttp is a PLACEHOLDER on branch serve, so that `corral serve`
// compiles and its process tests run before the real package (branch http)
// is merged. It has the agreed API but none of the RFC 9111 rules: it
// stores every 2xx answer to a GET for DefaultTTL, ignoring Cache-Control,
// Vary and validators, and passes everything else through. Drop this
// directory when the real corralhttp is merged.
package corralhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Options configures a Handler (see the agreed API).
type Options struct {
	Origin            *url.URL
	Cache             *corral.Options
	DefaultTTL        time.Duration
	MaxBodyBytes      int64
	MaxURLBytes       int
	OriginTimeout     time.Duration
	ForwardHeaders    []string
	CacheSetCookie    bool
	CacheServerErrors bool
	Transport         http.RoundTripper
	Logger            *slog.Logger
	Registerer        prometheus.Registerer
}

// Handler is the placeholder handler.
type Handler struct {
	o        Options
	cache    *corral.Cache
	client   *http.Client
	requests *prometheus.CounterVec
}

// New returns a Handler.
func New(rdb redis.UniversalClient, opts Options) (*Handler, error) {
	if opts.Origin == nil || opts.Origin.Host == "" {
		return nil, errors.New("corralhttp: Options.Origin is required")
	}
	c, err := corral.New(rdb, opts.Cache)
	if err != nil {
		return nil, err
	}
	if opts.OriginTimeout == 0 {
		opts.OriginTimeout = 30 * time.Second
	}
	h := &Handler{o: opts, cache: c, client: &http.Client{Timeout: opts.OriginTimeout}}
	h.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_http_requests_total", Help: "Requests served, by X-Cache."}, []string{"cache"})
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(h.requests); err != nil {
			c.Close()
			return nil, err
		}
	}
	return h, nil
}

// stored is a response as stored.
type stored struct {
	Status int
	Header http.Header
	Body   []byte
}

// ServeHTTP answers r.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u := *h.o.Origin
	u.Path += r.URL.Path
	u.RawQuery = r.URL.RawQuery
	if r.Method != http.MethodGet || h.o.DefaultTTL <= 0 {
		h.pass(w, r, u.String())
		return
	}
	var loaded atomic.Bool
	v, err := h.cache.Fetch(r.Context(), "GET "+u.String(), h.o.DefaultTTL, func(ctx context.Context) ([]byte, error) {
		loaded.Store(true)
		s, err := h.get(ctx, u.String())
		if err != nil {
			return nil, err
		}
		return json.Marshal(s)
	})
	var s stored
	if err == nil {
		err = json.Unmarshal(v, &s)
	}
	if err != nil {
		http.Error(w, "corral: origin failed", http.StatusBadGateway)
		return
	}
	xc := "HIT"
	if loaded.Load() {
		xc = "MISS"
	}
	h.requests.WithLabelValues(xc).Inc()
	for k, vs := range s.Header {
		w.Header()[k] = vs
	}
	w.Header().Set("X-Cache", xc)
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
}

func (h *Handler) get(ctx context.Context, u string) (stored, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return stored{}, err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return stored{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return stored{}, err
	}
	if resp.StatusCode/100 != 2 {
		return stored{}, fmt.Errorf("corralhttp: origin answered %s", resp.Status)
	}
	return stored{resp.StatusCode, resp.Header, body}, nil
}

func (h *Handler) pass(w http.ResponseWriter, r *http.Request, u string) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := h.client.Do(req)
	if err != nil {
		http.Error(w, "corral: origin failed", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = io.Copy(&buf, resp.Body)
	h.requests.WithLabelValues("PASS").Inc()
	w.Header().Set("X-Cache", "PASS")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(buf.Bytes())
}

// Close closes the Cache.
func (h *Handler) Close() error { return h.cache.Close() }

// Stats returns the Cache's Stats.
func (h *Handler) Stats() corral.Stats { return h.cache.Stats() }
