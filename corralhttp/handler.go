package corralhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/corralhq/corral"
)

// Options configures a Handler. The zero value of a field means its
// documented default; Origin is required.
type Options struct {
	// Origin is the server whose responses are cached:
	// scheme://host[:port][/base path]. The base path is put before every
	// request's path. Required.
	Origin *url.URL

	// Cache configures the corral Cache the Handler creates (Prefix,
	// NearCache, Observer, RedisTimeout...). nil means corral's defaults.
	// LoadTimeout defaults to OriginTimeout plus a second, and
	// MaxValueBytes to MaxBodyBytes plus 1 MiB for the headers; StaleTTL,
	// Jitter and the XFetch settings are the origin's to decide, per
	// response, and are not used.
	Cache *corral.Options

	// DefaultTTL is how long a response without explicit freshness (no
	// max-age, s-maxage or Expires) nor heuristic freshness (see
	// HeuristicMaxTTL), but of a status RFC 9110 calls heuristically
	// cacheable (200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501)
	// or public, is fresh. Default 0: such responses are not stored.
	DefaultTTL time.Duration

	// HeuristicMaxTTL caps the heuristic freshness (RFC 9111 section
	// 4.2.2) of a response without explicit freshness but with a valid
	// Last-Modified, of a heuristically cacheable status or public: 10% of
	// the time from its Last-Modified to its Date, at most this. It ranks
	// before DefaultTTL. Default 24h.
	HeuristicMaxTTL time.Duration

	// DisableHeuristicFreshness gives no response heuristic freshness:
	// those without explicit freshness get DefaultTTL, or are not stored.
	DisableHeuristicFreshness bool

	// CacheName names this cache in the Cache-Status (RFC 9211) and Via
	// (RFC 9110 section 7.6.3) headers it adds: a token starting with a
	// letter. Default "corral".
	CacheName string

	// AccessLog, when set, receives one record per request, at level Info:
	// its method, path (without the query, which may hold tokens), status,
	// X-Cache value (or ERROR, GONE), bytes of body sent, duration and the
	// client's address; never a header. Default none.
	AccessLog *slog.Logger

	// MaxBodyBytes is the largest body, in bytes, stored. A larger response
	// is not stored: the load stops reading it at the limit and hands it to
	// its own request, which streams it to the client (X-Cache: PASS), and
	// the URL passes (see PassTTL), so each request for it streams from the
	// origin on its own. Default 8 MiB.
	MaxBodyBytes int64

	// MaxURLBytes is the longest request URI (path and query), in bytes,
	// served; a longer one gets 414 URI Too Long. Default 8192.
	MaxURLBytes int

	// OriginTimeout bounds one exchange with the origin, body included.
	// A request whose origin exchange runs past it gets 504 Gateway
	// Timeout. Default 30s.
	OriginTimeout time.Duration

	// ForwardHeaders lists the request headers sent to the origin. Each is
	// part of the cache key, so no header the origin sees can vary a
	// response that others are served, and each distinct value of one
	// costs its own origin request: browsers send many different Accept
	// and Accept-Language values, so list only headers the origin needs.
	// Hop-by-hop and conditional headers (If-None-Match, Range...) are
	// never forwarded; Authorization always is; the headers a response's
	// Vary names are, and are keyed, for that URL's variants (see the
	// package doc). Default none.
	ForwardHeaders []string

	// TargetedCacheControl names a response header that this cache follows
	// ahead of CDN-Cache-Control and Cache-Control (RFC 9213), so that the
	// origin can speak to it alone: "Corral-Cache-Control", say. It holds
	// cache directives as a Structured Fields Dictionary ("max-age=60,
	// stale-while-revalidate=30"); an invalid or empty one is ignored.
	// Default none: CDN-Cache-Control, then Cache-Control.
	TargetedCacheControl string

	// CacheSetCookie stores responses that carry Set-Cookie (with it).
	// Default false: they are passed to their own request only.
	CacheSetCookie bool

	// CacheServerErrors stores 5xx responses whose headers allow it.
	// Default false: a 5xx is passed to the requests of its load and not
	// stored; a stale response is served instead when the origin allowed it
	// (stale-if-error).
	CacheServerErrors bool

	// PassTTL is how long a URL whose response could not be shared
	// (private, no-store, Set-Cookie, too large, no freshness) is passed
	// straight to the origin, each request on its own, before it is tried
	// through the cache again ("hit-for-pass"). Default 10s.
	PassTTL time.Duration

	// RevalidateKeep is how long past its freshness a copy of a response
	// with validators (ETag, Last-Modified) is kept, when the response has
	// no stale-while-revalidate window or is no-cache, so that the next
	// load asks the origin with If-None-Match / If-Modified-Since and a 304
	// refreshes it without the body. It costs a second copy in Redis for
	// such responses. Default 10m. (A response whose stale-if-error window
	// is longer than its stale-while-revalidate one is kept as that copy
	// for its stale-if-error window, whatever RevalidateKeep.)
	RevalidateKeep time.Duration

	// DisableRevalidateKeep keeps no copy for revalidation: such responses
	// are fetched whole once they expire.
	DisableRevalidateKeep bool

	// Transport sends the requests to the origin. Default: a clone of
	// http.DefaultTransport. When it is an *http.Transport, a response with
	// a Transfer-Encoding it does not read (anything but chunked) is
	// fetched again over a connection of its own and decoded (codings.go).
	Transport http.RoundTripper

	// Logger receives warnings and debug events. Default slog.Default().
	Logger *slog.Logger

	// Registerer, when set, has the Handler's request metrics registered
	// (see the package doc).
	Registerer prometheus.Registerer
}

// Defaults of Options.
const (
	DefaultMaxBodyBytes    = 8 << 20
	DefaultMaxURLBytes     = 8 << 10
	DefaultOriginTimeout   = 30 * time.Second
	DefaultPassTTL         = 10 * time.Second
	DefaultRevalidateKeep  = 10 * time.Minute
	DefaultHeuristicMaxTTL = 24 * time.Hour
	DefaultCacheName       = "corral"
)

// ErrInvalidOptions is wrapped by New's errors about its Options.
var ErrInvalidOptions = errors.New("corralhttp: invalid options")

// A Handler is an HTTP read-through cache in front of one origin: see the
// package doc. It is safe for concurrent use.
type Handler struct {
	opts    Options
	origin  *url.URL
	forward []string // canonical names, sorted
	cache   *corral.Cache
	client  *http.Client
	proxy   *httputil.ReverseProxy
	metrics *metrics
	faults  *faultLog
	log     *slog.Logger
}

// New returns a Handler caching opts.Origin in the Redis of rdb. Errors:
// ErrInvalidOptions (wrapped) for bad options, and corral.New's.
func New(rdb redis.UniversalClient, opts Options) (*Handler, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Handler{opts: o, origin: o.Origin, forward: forwardList(o.ForwardHeaders), log: o.Logger, faults: newFaultLog(o.Logger)}
	copts := cacheOptions(&o)
	copts.Observer = corral.MultiObserver(outcomes{}, copts.Observer)
	if h.cache, err = corral.New(rdb, &copts); err != nil {
		return nil, err
	}
	h.client = &http.Client{
		Transport:     withCodings(o.Transport),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	h.proxy = h.newProxy()
	if h.metrics, err = newMetrics(o.Registerer); err != nil {
		h.cache.Close()
		return nil, err
	}
	return h, nil
}

// withDefaults validates o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Origin == nil:
		return o, fmt.Errorf("%w: Origin is required", ErrInvalidOptions)
	case o.Origin.Scheme != "http" && o.Origin.Scheme != "https":
		return o, fmt.Errorf("%w: Origin %q: scheme must be http or https", ErrInvalidOptions, o.Origin.Redacted())
	case o.Origin.Host == "":
		return o, fmt.Errorf("%w: Origin %q has no host", ErrInvalidOptions, o.Origin.Redacted())
	case o.Origin.RawQuery != "" || o.Origin.Fragment != "":
		return o, fmt.Errorf("%w: Origin %q: a query or fragment has no place there", ErrInvalidOptions, o.Origin.Redacted())
	case o.TargetedCacheControl != "" && !isToken(o.TargetedCacheControl):
		return o, fmt.Errorf("%w: TargetedCacheControl %q is not a header name", ErrInvalidOptions, o.TargetedCacheControl)
	case o.CacheName != "" && !isCacheName(o.CacheName):
		return o, fmt.Errorf("%w: CacheName %q is not a token starting with a letter", ErrInvalidOptions, o.CacheName)
	case o.DefaultTTL < 0 || o.MaxBodyBytes < 0 || o.MaxURLBytes < 0 || o.OriginTimeout < 0 || o.PassTTL < 0 || o.RevalidateKeep < 0 ||
		o.HeuristicMaxTTL < 0:
		return o, fmt.Errorf("%w: durations and sizes may not be negative", ErrInvalidOptions)
	}
	u := *o.Origin
	o.Origin = &u
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.OriginTimeout, DefaultOriginTimeout)
	def(&o.PassTTL, DefaultPassTTL)
	def(&o.RevalidateKeep, DefaultRevalidateKeep)
	def(&o.HeuristicMaxTTL, DefaultHeuristicMaxTTL)
	if o.DisableRevalidateKeep {
		o.RevalidateKeep = 0
	}
	if o.DisableHeuristicFreshness {
		o.HeuristicMaxTTL = 0
	}
	if o.CacheName == "" {
		o.CacheName = DefaultCacheName
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxURLBytes == 0 {
		o.MaxURLBytes = DefaultMaxURLBytes
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// cacheOptions returns the options of the Handler's Cache.
func cacheOptions(o *Options) corral.Options {
	var c corral.Options
	if o.Cache != nil {
		c = *o.Cache
	}
	if c.LoadTimeout == 0 {
		c.LoadTimeout = o.OriginTimeout + time.Second
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = int(min(o.MaxBodyBytes, 1<<40)) + 1<<20
	}
	if c.Logger == nil {
		c.Logger = o.Logger
	}
	c.StaleTTL = 0 // each response's own, from its Cache-Control
	c.DisableJitter = true
	return c
}

// Close closes the Handler's Cache (corral.Cache.Close): requests after
// it get 503 Service Unavailable. Shut the HTTP server down first.
func (h *Handler) Close() error {
	return h.cache.Close()
}

// Ready waits until the Handler's Cache has made its start-up
// (corral.Cache.Ready): a readiness check that Redis answers. It returns
// what Cache.Ready returns; a Handler that is not ready serves all the
// same.
func (h *Handler) Ready(ctx context.Context) error {
	return h.cache.Ready(ctx)
}

// Stats returns the counters of the Handler's Cache.
func (h *Handler) Stats() corral.Stats {
	return h.cache.Stats()
}
