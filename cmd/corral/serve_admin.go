package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/corralprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// pingBound is the longest /healthz waits for Redis's PONG: under 1 s,
// Kubernetes' default probe timeout, so that a probe answers in time even
// when Redis is silent.
const pingBound = 500 * time.Millisecond

// admin serves corral serve's /metrics and /healthz.
type admin struct {
	registry  *prometheus.Registry
	collector *corralprom.Collector // the Cache's Observer
	health    redis.UniversalClient // pinged by /healthz (healthClient)
	pingLimit time.Duration         // how long /healthz waits for Redis's PONG
	// cache is the Handler, whose Health says what its own calls met (a
	// right denied, writes refused...: faults a PING does not meet), and
	// which /purge asks to purge. Set before the servers start; nil in
	// tests of the endpoints alone.
	cache interface {
		Health() error
		Purge(context.Context, corralhttp.Purge) error
	}
	log      *slog.Logger // where each purge is logged
	draining atomic.Bool  // set once shutting down: /healthz answers 503
}

// healthClient returns the client /healthz pings Redis with: opts, the
// cache's, with no retries (go-redis retries a command, and the pool a
// dial, with backoff, which made a probe wait out its bound instead of
// saying at once that Redis refuses connections), a pool of 2, and every
// exchange, the dial included, bounded by limit. The caller closes it.
func healthClient(opts redis.UniversalOptions, limit time.Duration) redis.UniversalClient {
	opts.MaxRetries, opts.MaxRedirects = -1, -1 // (a Cluster retries through MaxRedirects)
	opts.DialerRetries = 1                      // one attempt
	opts.PoolSize, opts.MinIdleConns, opts.MaxIdleConns, opts.MaxActiveConns = 2, 0, 2, 2
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = limit, limit, limit, limit
	opts.ContextTimeoutEnabled = true
	return redis.NewUniversalClient(&opts)
}

// newAdmin returns the admin endpoints, with a registry holding the
// Cache's metrics (corralprom), the Go runtime's and the process's; the
// Handler registers its own there too. health is the client /healthz
// pings Redis with (healthClient), for at most pingLimit.
func newAdmin(health redis.UniversalClient, pingLimit time.Duration) (*admin, error) {
	col, err := corralprom.New(nil)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{col, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, errorf("serve: metrics: %w", err)
		}
	}
	return &admin{registry: reg, collector: col, health: health, pingLimit: pingLimit}, nil
}

// routes adds /metrics and /healthz to mux, for every method, so that
// they never reach the origin when they share the cache's listener:
// GET and HEAD are answered, other methods get 405.
func (a *admin) routes(mux *http.ServeMux, log *slog.Logger) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", a.healthz)
	for _, path := range []string{"/metrics", "/healthz"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "405 method not allowed: "+path+" answers GET and HEAD", http.StatusMethodNotAllowed)
		})
	}
}

// healthz answers 200 while serving, with a line saying whether Redis
// can be used (a sidecar whose Redis fails still serves: degraded, and
// why), and 503 once shutting down.
func (a *admin) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if a.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "shutting down")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.pingLimit)
	defer cancel()
	fmt.Fprintln(w, a.healthLine(ctx))
}

// healthLine is /healthz's line: what a PING bounded by pingLimit met,
// when it failed; otherwise what the Handler's calls met (Health), so
// that a fault that leaves PING answered shows too (an ACL user without
// EVALSHA, Redis out of memory, a replica). Neither names more than a
// reply's code: no server text, no address, as /healthz may be public.
func (a *admin) healthLine(ctx context.Context) string {
	if err := a.health.Ping(ctx).Err(); err != nil {
		return pingHealth(err, a.pingLimit)
	}
	var f *corralhttp.Fault
	if a.cache != nil && errors.As(a.cache.Health(), &f) {
		return "degraded: " + f.Reason + "; " + f.Serving
	}
	return "ok: serving; redis answers"
}

// pingHealth returns /healthz's line for err, the error of a PING bounded
// by limit. It names the reply's code (WRONGPASS, NOAUTH, LOADING...) but
// not its text, which is the server's, nor any address.
func pingHealth(err error, limit time.Duration) string {
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		return fmt.Sprintf("degraded: redis refuses PING (%s); %s", replyCode(reply), servingWithout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "degraded: redis refuses connections; " + servingWithout
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return fmt.Sprintf("degraded: redis does not answer PING within %v; %s", limit, servingWithout)
	}
	return "degraded: redis cannot be reached; " + servingWithout
}

// servingWithout is what a sidecar does while Redis cannot be used.
const servingWithout = "serving from memory and the origin"

// replyCode returns the first word of an error reply: its code.
func replyCode(reply redis.Error) string {
	code, _, _ := strings.Cut(reply.Error(), " ")
	return code
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// pingAtStart PINGs Redis once with health, for at most limit, and logs
// what a refusal or no answer means (the sidecar serves either way): an
// error reply is a client Redis refuses (a wrong password, a database
// index out of range), logged as an error naming the reply's code; no
// answer is a warning. Neither line holds the password.
func pingAtStart(ctx context.Context, health redis.UniversalClient, limit time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := health.Ping(ctx).Err()
	var reply redis.Error
	switch {
	case err == nil:
		log.Debug("corral serve: Redis answers PING")
	case errors.As(err, &reply):
		log.Error(fmt.Sprintf("corral serve: Redis refuses this client (%s); serving from memory and the origin until it accepts", replyCode(reply)),
			"reply", reply.Error())
	default:
		log.Warn("corral serve: no answer from Redis; serving from memory and the origin until it answers", errAttr(err))
	}
}

// readyAtStart gives the Handler's Cache up to limit to make its start-up
// (Cache.Ready) before the first request: on a Cluster, the round trips a
// stampede at once on a sidecar just started would otherwise wait for; on
// one server, the start-up script its first peek would otherwise carry.
// pingAtStart has warned already when Redis does not answer; the sidecar
// serves either way.
func readyAtStart(ctx context.Context, h *corralhttp.Handler, limit time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := h.Ready(ctx); err != nil {
		log.Debug("corral serve: the cache is not ready; serving all the same", errAttr(err))
	}
}

// servers returns the HTTP servers to run: the cache on mainLn, with
// /metrics and /healthz beside it unless adminLn is set, where they are
// served instead.
func (a *admin) servers(cache http.Handler, mainLn, adminLn net.Listener, log *slog.Logger) []server {
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{Handler: h, ErrorLog: errLog, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	}
	mux := http.NewServeMux()
	a.routes(mux, log)
	if adminLn == nil {
		return []server{{newServer(beside(mux, cache)), mainLn}}
	}
	a.log = log
	mux.HandleFunc("POST /purge", a.purge) // never on the cache's listener, where /purge is the origin's
	mux.HandleFunc("/purge", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "POST")
		http.Error(w, "405 method not allowed: /purge answers POST", http.StatusMethodNotAllowed)
	})
	return []server{{newServer(cache), mainLn}, {newServer(mux), adminLn}}
}

// beside serves /metrics and /healthz with admin and every other path with
// cache, as sent: not through a ServeMux, which would redirect a path it
// cleans (//x, /a/../b) instead of passing it to the origin.
func beside(admin, cache http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" || r.URL.Path == "/healthz" {
			admin.ServeHTTP(w, r)
			return
		}
		cache.ServeHTTP(w, r)
	})
}

// purgeAnswer is /purge's answer, one JSON object: what was asked, and
// what became of it.
type purgeAnswer struct {
	// Status is "purged", "queued" (Redis could not take it: the sidecar
	// applies it once Redis answers), "failed" or "invalid" (a bad request:
	// nothing purged).
	Status string   `json:"status"`
	Keys   []string `json:"keys,omitempty"`
	URLs   []string `json:"urls,omitempty"`
	All    bool     `json:"all,omitempty"`
	Soft   bool     `json:"soft,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// purge answers POST /purge: key= (a surrogate key), url= (a path, with
// or without a query), each repeatable, or all=1; soft=1 for a soft purge
// (the parameters in the query or in a form body). It answers 200 once
// purged, 202 when Redis could not take the purge and it was queued, 400
// for a bad request (nothing purged), 503 when it failed; a JSON object
// says which (purgeAnswer). Each purge is logged.
func (a *admin) purge(w http.ResponseWriter, r *http.Request) {
	p, err := purgeOf(r)
	ans := purgeAnswer{Status: "purged", Keys: p.Keys, URLs: p.URLs, All: p.All, Soft: p.Soft}
	code := http.StatusOK
	if err == nil {
		err = a.cache.Purge(r.Context(), p)
	}
	switch {
	case err == nil:
	case errors.Is(err, corralhttp.ErrInvalidPurge) || errors.Is(err, errBadPurge):
		code, ans.Status = http.StatusBadRequest, "invalid"
	case corralhttp.Queued(err):
		code, ans.Status = http.StatusAccepted, "queued"
	default:
		code, ans.Status = http.StatusServiceUnavailable, "failed"
	}
	attrs := []any{"keys", p.Keys, "urls", p.URLs, "all", p.All, "soft", p.Soft, "remote", r.RemoteAddr}
	level := slog.LevelInfo
	if err != nil {
		ans.Error = err.Error()
		attrs, level = append(attrs, errAttr(err)), slog.LevelWarn
	}
	a.log.Log(r.Context(), level, "corral serve: purge "+ans.Status, attrs...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(ans) // the client's loss, if it fails
}

// errBadPurge is wrapped by purgeOf's errors.
var errBadPurge = errors.New("bad /purge request")

// purgeOf reads the Purge a /purge request asks for: key and url values,
// all and soft flags (1 or 0, true or false). An unknown parameter, an
// empty value, or none of key, url and all is an error (errBadPurge).
func purgeOf(r *http.Request) (corralhttp.Purge, error) {
	var p corralhttp.Purge
	if err := r.ParseForm(); err != nil {
		return p, fmt.Errorf("%w: %w", errBadPurge, err)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Form)) {
		for _, v := range r.Form[name] {
			var err error
			switch {
			case v == "":
				err = fmt.Errorf("%w: %s= is empty", errBadPurge, name)
			case name == "key":
				p.Keys = append(p.Keys, v)
			case name == "url":
				p.URLs = append(p.URLs, v)
			case name == "all":
				p.All, err = purgeFlag(name, v)
			case name == "soft":
				p.Soft, err = purgeFlag(name, v)
			default:
				err = fmt.Errorf("%w: unknown parameter %q (key, url, all, soft)", errBadPurge, name)
			}
			if err != nil {
				return p, err
			}
		}
	}
	switch {
	case len(p.Keys) == 0 && len(p.URLs) == 0 && !p.All:
		return p, fmt.Errorf("%w: give key=K (a surrogate key), url=/path or all=1", errBadPurge)
	case p.All && (len(p.Keys) > 0 || len(p.URLs) > 0):
		return p, fmt.Errorf("%w: all=1 purges everything: give it without key= or url=", errBadPurge)
	case p.All && p.Soft:
		return p, fmt.Errorf("%w: all=1 is hard only: a soft purge names key= or url=", errBadPurge)
	}
	return p, nil
}

// purgeFlag reads the value v of /purge's flag parameter name.
func purgeFlag(name, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: %s=%s: want 1 or 0", errBadPurge, name, v)
	}
	return b, nil
}
