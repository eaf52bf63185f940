package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/corralprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// admin serves corral serve's /metrics and /healthz.
type admin struct {
	registry  *prometheus.Registry
	collector *corralprom.Collector // the Cache's Observer
	rdb       redis.UniversalClient // pinged by /healthz
	pingLimit time.Duration         // how long /healthz waits for Redis's PONG
	draining  atomic.Bool           // set once shutting down: /healthz answers 503
}

// newAdmin returns the admin endpoints, with a registry holding the
// Cache's metrics (corralprom), the Go runtime's and the process's; the
// Handler registers its own there too.
func newAdmin(rdb redis.UniversalClient, pingLimit time.Duration) (*admin, error) {
	col, err := corralprom.New(nil)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{col, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: metrics: %w", err)
		}
	}
	return &admin{registry: reg, collector: col, rdb: rdb, pingLimit: pingLimit}, nil
}

// routes adds /metrics and /healthz to mux.
func (a *admin) routes(mux *http.ServeMux, log *slog.Logger) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}))
	mux.HandleFunc("GET /healthz", a.healthz)
}

// healthz answers 200 while serving, with a line saying whether Redis
// answered a PING within pingLimit (a sidecar whose Redis is down still
// serves, from the origin: degraded), and 503 once shutting down.
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
	err := a.rdb.Ping(ctx).Err()
	var reply redis.Error
	switch {
	case err == nil:
		fmt.Fprintln(w, "ok: serving; redis answers")
	case errors.As(err, &reply):
		// Only the reply's code (WRONGPASS, NOAUTH, LOADING...): the
		// text is the server's, and /healthz may be public.
		code, _, _ := strings.Cut(reply.Error(), " ")
		fmt.Fprintf(w, "degraded: redis refuses PING (%s); serving from the origin\n", code)
	default:
		fmt.Fprintf(w, "degraded: redis does not answer PING within %v; serving from the origin\n", a.pingLimit)
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
	if adminLn == nil {
		mux := http.NewServeMux()
		a.routes(mux, log)
		mux.Handle("/", cache)
		return []server{{newServer(mux), mainLn}}
	}
	mux := http.NewServeMux()
	a.routes(mux, log)
	return []server{{newServer(cache), mainLn}, {newServer(mux), adminLn}}
}
