package corralhttp

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Handler's Prometheus metrics; nil when Options has no
// Registerer (every method is then a no-op). Labels never hold a URL or
// key: there can be many.
type metrics struct {
	requests   *prometheus.CounterVec   // by X-Cache value, or ERROR
	duration   *prometheus.HistogramVec // by the same
	originReqs *prometheus.CounterVec   // by status code, or "error"
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_http_requests_total",
			Help: "Requests, by how they were answered: the X-Cache value, ERROR for an answer the sidecar made (400, 414, 502, 503, 504), GONE when the client left first.",
		}, []string{"cache"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "corral_http_request_duration_seconds",
			Help:    "Time to answer a request, by how it was answered, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"cache"}),
		originReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "corral_http_origin_requests_total",
			Help: "Requests sent to the origin, by the status code of its answer (error: no answer, or a body cut short).",
		}, []string{"code"}),
	}
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.originReqs, err = register(reg, m.originReqs); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c with reg, or returns the same collector registered
// there already (by a second Handler, say).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &are):
		if old, ok := are.ExistingCollector.(C); ok {
			return old, nil
		}
	}
	return c, err
}

// The metrics labels of requests not answered with an X-Cache value.
const (
	labelError = "ERROR" // an answer the Handler made up: 400, 414, 502, 503, 504
	labelGone  = "GONE"  // the client left before its answer
)

func (m *metrics) request(label string, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(label).Inc()
	m.duration.WithLabelValues(label).Observe(took.Seconds())
}

func (m *metrics) origin(code string) {
	if m != nil {
		m.originReqs.WithLabelValues(code).Inc()
	}
}
