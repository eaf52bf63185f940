package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	core "github.com/corralhq/corral"
	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redisurl"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix starts the environment variable of each corral serve flag:
// CORRAL_SERVE_ and the flag's name in capitals, dashes as underscores.
const envPrefix = "CORRAL_SERVE_"

// serveFlags are corral serve's flags.
type serveFlags struct {
	origin, redis, listen, adminListen, prefix, logLevel string
	targetedCacheControl, cacheName, accessLog           string
	defaultTTL, originTimeout, nearTTL, redisTimeout     time.Duration
	shutdownTimeout, passTTL, revalidateKeep             time.Duration
	heuristicMaxTTL                                      time.Duration
	maxBody                                              int64
	maxURL, nearSize                                     int
	forwardHeaders                                       []string
	cacheSetCookie, cacheServerErrors                    bool
}

// newServeCmd returns `corral serve`.
func newServeCmd() *cobra.Command {
	o := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run an HTTP read-through cache in front of an origin, coalescing requests across the fleet through Redis",
		Long: `serve runs an HTTP read-through cache (a sidecar) in front of --origin.
Every sidecar sharing --redis (and --prefix) shares one cache: a response
missing from it is asked of the origin once, however many requests for it
arrive at once on however many sidecars; the others wait for that answer.

It caches the answers to GET and HEAD as RFC 9111, RFC 5861 and RFC 9213
say (the origin's CDN-Cache-Control, else Cache-Control: max-age, s-maxage,
no-store, private, no-cache, stale-while-revalidate, stale-if-error; a
--targeted-cache-control header ahead of both), keyed by method, URL and
the forwarded request headers (--forward-header: only those reach the
origin, so no other header can vary a shared answer, but for the headers
a response's Vary names, which are then sent and keyed for that URL's
variants). An answer without explicit freshness but with a Last-Modified
is fresh for a tenth of the time from that to its Date, at most
--heuristic-max-ttl (RFC 9111 4.2.2); --default-ttl is for answers with
neither. Each response says
where it came from in X-Cache: HIT, STALE, MISS (this request asked the
origin), COALESCED (served by another request's load, on this sidecar or
another) or PASS (not served through the cache); and the same in
Cache-Status (RFC 9211), after the origin's own members, naming the cache
(--cache-name):
  corral; hit                          HIT
  corral; hit; detail=stale            STALE, while it is revalidated
  corral; fwd=stale; fwd-status=503    STALE, because the origin failed
  corral; fwd=uri-miss; stored         MISS (fwd=stale when it replaced or
                                       revalidated an expired response,
                                       fwd-status=304 when a 304 did)
  corral; fwd=uri-miss; collapsed      COALESCED
  corral; fwd=bypass                   PASS (fwd=method: not GET or HEAD)
Via gets "1.1 corral" on responses and on requests to the origin. A 103
Early Hints reaches the client whose request asked the origin. A GET with
one byte range of a stored response gets 206 from the cache, and an
If-None-Match or If-Modified-Since that matches gets 304. Other methods go
to the origin as they are (PASS); a POST, PUT, PATCH or DELETE that it
accepts invalidates the stored response of its URL. Origin failures get
502, origin timeouts 504, URLs over --max-url 414.

--access-log text or json writes one line per request to stdout (the
sidecar's own log goes to stderr): method, path, status, cache (the
X-Cache value, or ERROR, GONE), bytes, duration, remote. The query is not
logged (it may hold tokens), nor any header (Authorization, Cookie). Off
by default: a sidecar exists for bursts, and a line per request then
costs more than the answer; turn it on where something reads it.

Redis faults are not origin failures: no request gets a 5xx for one. While
Redis refuses connections, is silent past --redis-timeout, refuses the
sidecar's password (WRONGPASS, NOAUTH), is out of memory (OOM) or is a
replica (READONLY), the sidecar serves what it can from Redis and its own
memory and asks the origin itself for the rest, once per URL at a time
(that answer then served from memory for a second). While the ACL user
lacks a right corral needs (NOPERM), the requests that need it (all of
them, without EVALSHA) are passed to the origin each on its own, uncached.
Each fault is logged once a minute at most, with the path of a request
that met it: as an error when Redis refuses the client with an error reply
(WRONGPASS, NOAUTH, NOPERM), otherwise as a warning.

/metrics (Prometheus) and /healthz are served on --admin-listen, or, when it
is empty, on --listen, where they never reach the origin (methods other
than GET and HEAD get 405). /healthz answers 200 while serving, with one
line: "ok: serving; redis answers", or "degraded:", why, and what the
sidecar does meanwhile ("degraded: redis refuses connections; serving from
memory and the origin"; "redis does not answer PING within 500ms", "redis
refuses PING (WRONGPASS)", "redis refuses the cache's calls (WRONGPASS)",
"redis denies a right corral needs (NOPERM)", "redis refuses writes
(OOM)"...), naming no more than a reply's code: no server text, no address.
It waits 500ms at most for Redis's PONG (or --redis-timeout if shorter); a
right denied or writes refused show for 10s after a request met them.

Responses carry tags to purge them by: the members of the origin's
Surrogate-Key (space-separated) and Cache-Tag (comma-separated) headers,
which are not passed on to clients, and their URL's. POST /purge on
--admin-listen (only there: without it, no sidecar purges, and /purge on
--listen is the origin's) purges, for every sidecar sharing --redis and
--prefix: key=K (the responses tagged K) and url=/path (every response
stored for it, whatever its headers; a path without a query: every query
of it), each repeatable, or all=1 (everything under --prefix); soft=1
makes them stale rather than gone (served STALE, inside their
stale-while-revalidate window, while one request revalidates them). It
answers a JSON object: 200 purged, 202 queued (Redis could not take it;
applied once Redis answers), 400 for a bad request (nothing purged), 503
failed. corral purge does the same from a script.

On SIGINT or SIGTERM the sidecar stops accepting connections, lets
requests under way finish for up to --shutdown-timeout, and exits.
Meanwhile /healthz answers 503 on --admin-listen; on --listen, whose
listener closes at once, it is refused: give load balancers --admin-listen.

Every flag can also be set by an environment variable: CORRAL_SERVE_ and the
flag's name in capitals with dashes as underscores (CORRAL_SERVE_REDIS,
CORRAL_SERVE_DEFAULT_TTL; --forward-header takes a comma-separated list). A
flag on the command line wins over its variable; a CORRAL_SERVE_ variable
that is no flag's is an error. Give a Redis URL with a password through
CORRAL_SERVE_REDIS rather than the command line, which other users of the
machine can read; percent-encode its special characters (/ as %2F, # as
%23, ? as %3F, @ as %40, a comma as %2C, % as %25). Passwords are never logged or shown.`,
		Example: `  corral serve --origin http://127.0.0.1:9000 --redis redis://127.0.0.1:6379
  CORRAL_SERVE_REDIS='rediss://app:secret@redis.internal:6380' corral serve --origin https://api.internal --listen :8080 --admin-listen :9090
  corral serve --origin http://app:9000 --redis 'redis://10.0.0.1:6379?addr=10.0.0.2:6379' --default-ttl 30s --near-size 10000`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(cmd, errorf("unexpected argument %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags(), os.Environ()); err != nil {
				return usageError(cmd, err)
			}
			return runServe(cmd, *o)
		},
	}
	cmd.SetFlagErrorFunc(usageError)
	f := cmd.Flags()
	f.StringVar(&o.origin, "origin", "", "the origin's base URL, http:// or https:// (required)")
	f.StringVar(&o.redis, "redis", "", "Redis URL: redis:// or rediss:// (TLS), with user and password if needed; a Cluster as redis://h1:p1?addr=h2:p2 or redis://h1:p1,h2:p2 (required)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve the cache on")
	f.StringVar(&o.adminListen, "admin-listen", "", "address to serve /metrics, /healthz and POST /purge on (default: /metrics and /healthz on --listen, where /healthz is refused rather than 503 while shutting down, and no /purge)")
	f.DurationVar(&o.defaultTTL, "default-ttl", 0, "freshness of a storable response that gives none, explicit or heuristic (0: such responses are not stored)")
	f.DurationVar(&o.heuristicMaxTTL, "heuristic-max-ttl", corralhttp.DefaultHeuristicMaxTTL, "most heuristic freshness a response without explicit freshness gets from its Last-Modified (10% of the time since it; 0: none)")
	f.Int64Var(&o.maxBody, "max-body", corralhttp.DefaultMaxBodyBytes, "largest response body stored, in bytes; larger ones are passed through uncached")
	f.IntVar(&o.maxURL, "max-url", corralhttp.DefaultMaxURLBytes, "longest request URI, in bytes; longer ones get 414")
	f.DurationVar(&o.originTimeout, "origin-timeout", corralhttp.DefaultOriginTimeout, "bound of one origin exchange, body included; past it 504")
	f.StringSliceVar(&o.forwardHeaders, "forward-header", nil, "request header forwarded to the origin, and part of the cache key (each distinct value costs its own origin request); repeatable or comma-separated (default: none)")
	f.DurationVar(&o.passTTL, "pass-ttl", corralhttp.DefaultPassTTL, "how long a URL whose response may not be shared goes straight to the origin before the cache is tried again")
	f.DurationVar(&o.revalidateKeep, "revalidate-keep", corralhttp.DefaultRevalidateKeep, "how long an expired response with validators is kept to revalidate it with a conditional request (0: not kept)")
	f.StringVar(&o.targetedCacheControl, "targeted-cache-control", "", "response header whose cache directives (an RFC 8941 dictionary, as CDN-Cache-Control) this cache follows ahead of CDN-Cache-Control and Cache-Control, e.g. Corral-Cache-Control (default: none)")
	f.BoolVar(&o.cacheSetCookie, "cache-set-cookie", false, "store responses that carry Set-Cookie")
	f.BoolVar(&o.cacheServerErrors, "cache-server-errors", false, "store 5xx responses when their headers allow it")
	f.StringVar(&o.prefix, "prefix", core.DefaultPrefix, "prefix of the cache's Redis keys (corral.Options.Prefix); sidecars share a cache when they share it")
	f.IntVar(&o.nearSize, "near-size", 0, "entries held in each sidecar's memory in front of Redis (corral.Options.NearCache.Size; 0: no near cache)")
	f.DurationVar(&o.nearTTL, "near-ttl", core.DefaultNearCacheTTL, "longest a near cache copy is served without Redis confirming it")
	f.DurationVar(&o.redisTimeout, "redis-timeout", core.DefaultRedisTimeout, "how long Redis may stay silent before a call fails and the sidecar asks the origin itself: a call sent as Redis falls silent fails after 1 to 2 times it, later calls after it (corral.Options.RedisTimeout)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long requests under way may take to finish at shutdown")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.accessLog, "access-log", "off", "one line per request on stdout: off, text or json (no query, no header)")
	f.StringVar(&o.cacheName, "cache-name", corralhttp.DefaultCacheName, "this cache's name in the Cache-Status and Via headers (a token starting with a letter)")
	return cmd
}

// envName returns the environment variable of corral serve's flag named
// name.
func envName(name string) string { return envVar(envPrefix, name) }

// envVar returns the environment variable of the flag named name for a
// command whose variables start with prefix.
func envVar(prefix, name string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyEnv is applyEnvOf for corral serve.
func applyEnv(fs *pflag.FlagSet, environ []string) error {
	return applyEnvOf(fs, environ, envPrefix, "serve")
}

// applyEnvOf sets each flag of fs, corral command's, not given on the
// command line from its environment variable (envVar with prefix) in
// environ ("NAME=value", as os.Environ gives). A bad value is an error
// naming the variable, and so is a variable starting with prefix that is
// no flag's (a misspelt one would otherwise be ignored), named without its
// value, which may hold a password.
func applyEnvOf(fs *pflag.FlagSet, environ []string, prefix, command string) error {
	vars := make(map[string]string)
	for _, kv := range environ {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, prefix) {
			vars[k] = v
		}
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		name := envVar(prefix, f.Name)
		v, ok := vars[name]
		delete(vars, name)
		if !ok || f.Changed {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, errorf("%s: %w", name, err))
		}
	})
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		errs = append(errs, errorf("%s is set, but no flag of corral %s has that variable (%s and a flag's name in capitals, dashes as underscores)", name, command, prefix))
	}
	return errors.Join(errs...)
}

// serveConfig is what runServe builds from the flags.
type serveConfig struct {
	origin   *url.URL
	logLevel slog.Level
}

// check validates o, returning a usage error (without any password).
func (o serveFlags) check() (serveConfig, error) {
	var c serveConfig
	for _, r := range []struct {
		bad bool
		msg string
	}{
		{o.origin == "", "--origin is required (or " + envName("origin") + ")"},
		{o.redis == "", "--redis is required (or " + envName("redis") + ")"},
		{o.listen == "", "--listen must not be empty"},
		{o.defaultTTL < 0, fmt.Sprintf("--default-ttl must not be negative (got %v)", o.defaultTTL)},
		{o.maxBody <= 0, fmt.Sprintf("--max-body must be positive (got %d)", o.maxBody)},
		{o.maxURL <= 0, fmt.Sprintf("--max-url must be positive (got %d)", o.maxURL)},
		{o.originTimeout <= 0, fmt.Sprintf("--origin-timeout must be positive (got %v)", o.originTimeout)},
		{o.nearSize < 0, fmt.Sprintf("--near-size must not be negative (got %d)", o.nearSize)},
		{o.nearTTL <= 0, fmt.Sprintf("--near-ttl must be positive (got %v)", o.nearTTL)},
		{o.redisTimeout <= 0, fmt.Sprintf("--redis-timeout must be positive (got %v)", o.redisTimeout)},
		{o.passTTL <= 0, fmt.Sprintf("--pass-ttl must be positive (got %v)", o.passTTL)},
		{o.revalidateKeep < 0, fmt.Sprintf("--revalidate-keep must not be negative (got %v)", o.revalidateKeep)},
		{o.heuristicMaxTTL < 0, fmt.Sprintf("--heuristic-max-ttl must not be negative (got %v)", o.heuristicMaxTTL)},
		{o.accessLog != "off" && o.accessLog != "text" && o.accessLog != "json", fmt.Sprintf("--access-log must be off, text or json (got %q)", o.accessLog)},
		{!isCacheName(o.cacheName), fmt.Sprintf("--cache-name must be a token starting with a letter, such as edge-1 (got %q)", o.cacheName)},
		{o.shutdownTimeout <= 0, fmt.Sprintf("--shutdown-timeout must be positive (got %v)", o.shutdownTimeout)},
		{o.targetedCacheControl != "" && !isHeaderName(o.targetedCacheControl),
			fmt.Sprintf("--targeted-cache-control must be a header name, such as Corral-Cache-Control (got %q)", o.targetedCacheControl)},
	} {
		if r.bad {
			return c, errors.New(r.msg)
		}
	}
	if !strings.Contains(o.origin, "://") {
		if strings.Contains(o.origin, "@") { // may hold a password: not shown
			return c, errors.New("--origin is not a URL: it has no scheme; write http://host:port (https:// for TLS)")
		}
		return c, errorf("--origin is not a URL: it has no scheme (%q); write http://%s (https://%s for TLS)", o.origin, o.origin, o.origin)
	}
	u, err := url.Parse(o.origin)
	if err != nil {
		return c, errorf("--origin: %w", redactURLError(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return c, errorf("--origin must be an http:// or https:// URL with a host (got %q)", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return c, errorf("--origin must have no query or fragment (got %q)", u.Redacted())
	}
	c.origin = u
	if err := c.logLevel.UnmarshalText([]byte(o.logLevel)); err != nil {
		return c, errorf("--log-level: unknown level %q (debug, info, warn or error)", o.logLevel)
	}
	return c, nil
}

// isCacheName reports whether name may name the cache in Cache-Status
// and Via: a header-name token that starts with a letter.
func isCacheName(name string) bool {
	return isHeaderName(name) && (name[0] >= 'a' && name[0] <= 'z' || name[0] >= 'A' && name[0] <= 'Z')
}

// isHeaderName reports whether name is a field name (an RFC 9110 token).
func isHeaderName(name string) bool {
	return name != "" && !strings.ContainsFunc(name, func(r rune) bool {
		return r > '~' || !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
	})
}

// redactURLError returns err without the URL net/url puts in its errors
// (with a password in it, perhaps).
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// runServe is corral serve's RunE.
func runServe(cmd *cobra.Command, o serveFlags) error {
	c, err := o.check()
	if err != nil {
		return usageError(cmd, err)
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: c.logLevel}))
	slog.SetDefault(log) // go-redis's own lines go there (redisLog)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	uo, err := redisurl.Parse(ctx, o.redis)
	if err != nil {
		return usageError(cmd, errorf("--redis: %w", err))
	}
	rdb := redis.NewUniversalClient(&uo)
	defer rdb.Close()
	pingLimit := min(o.redisTimeout, pingBound)
	health := healthClient(uo, pingLimit)
	defer health.Close()
	adm, err := newAdmin(health, pingLimit)
	if err != nil {
		return err
	}
	pingAtStart(ctx, health, pingLimit, log)
	h, err := corralhttp.New(rdb, corralhttp.Options{
		Origin: c.origin,
		Cache: &core.Options{
			Prefix:       o.prefix,
			RedisTimeout: o.redisTimeout,
			NearCache:    core.NearCacheOptions{Size: o.nearSize, TTL: o.nearTTL},
			Observer:     adm.collector,
			Logger:       log,
		},
		DefaultTTL:                o.defaultTTL,
		MaxBodyBytes:              o.maxBody,
		MaxURLBytes:               o.maxURL,
		OriginTimeout:             o.originTimeout,
		ForwardHeaders:            o.forwardHeaders,
		TargetedCacheControl:      o.targetedCacheControl,
		CacheSetCookie:            o.cacheSetCookie,
		CacheServerErrors:         o.cacheServerErrors,
		PassTTL:                   o.passTTL,
		RevalidateKeep:            o.revalidateKeep,
		DisableRevalidateKeep:     o.revalidateKeep == 0,
		HeuristicMaxTTL:           o.heuristicMaxTTL,
		DisableHeuristicFreshness: o.heuristicMaxTTL == 0,
		CacheName:                 o.cacheName,
		AccessLog:                 accessLogger(o.accessLog, cmd.OutOrStdout()),
		Logger:                    log,
		Registerer:                adm.registry,
	})
	if err != nil {
		return usageError(cmd, err)
	}
	defer h.Close()
	adm.cache = h
	readyAtStart(ctx, h, pingLimit, log)

	mainLn, adminLn, err := listen(o.listen, o.adminListen)
	if err != nil {
		return err
	}
	servers := adm.servers(h, mainLn, adminLn, log)
	log.Info("corral serve: listening", "listen", mainLn.Addr().String(), "admin", adminAddr(mainLn, adminLn),
		"origin", c.origin.Redacted(), "redis", redisurl.Redact(o.redis), "prefix", o.prefix)
	return serveUntil(ctx, servers, adm, o.shutdownTimeout, log)
}

// accessLogger returns the access log of --access-log mode, writing to w;
// nil when it is off.
func accessLogger(mode string, w io.Writer) *slog.Logger {
	switch mode {
	case "text":
		return slog.New(slog.NewTextHandler(w, nil))
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return nil
}

// listen opens the main listener and, when adminAddr is set, the admin one.
func listen(addr, adminAddr string) (mainLn, adminLn net.Listener, err error) {
	if mainLn, err = net.Listen("tcp", addr); err != nil {
		return nil, nil, errorf("serve: --listen: %w", err)
	}
	if adminAddr == "" {
		return mainLn, nil, nil
	}
	if adminLn, err = net.Listen("tcp", adminAddr); err != nil {
		mainLn.Close()
		return nil, nil, errorf("serve: --admin-listen: %w", err)
	}
	return mainLn, adminLn, nil
}

// adminAddr says where /metrics and /healthz are served.
func adminAddr(mainLn, adminLn net.Listener) string {
	if adminLn == nil {
		return mainLn.Addr().String()
	}
	return adminLn.Addr().String()
}

// server is one HTTP server and its listener.
type server struct {
	srv *http.Server
	ln  net.Listener
}

// serveUntil runs servers (the main one first) until ctx ends or one
// fails, then shuts them down in order: the main one stops accepting and
// finishes its requests first, while the admin one still answers /healthz
// with 503. It returns an error when a server failed or a request was cut
// at timeout.
func serveUntil(ctx context.Context, servers []server, adm *admin, timeout time.Duration, log *slog.Logger) error {
	failed := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				failed <- err
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
		log.Info("corral serve: shutting down", "timeout", timeout)
	case err = <-failed:
		err = errorf("serve: %w", err)
		log.Error("corral serve: server failed, shutting down", errAttr(err))
	}
	adm.draining.Store(true)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, s := range servers {
		if serr := s.srv.Shutdown(sctx); serr != nil {
			_ = s.srv.Close()
			if err == nil {
				err = errorf("serve: requests still under way after --shutdown-timeout %v were cut", timeout)
			}
		}
	}
	if err == nil {
		log.Info("corral serve: stopped")
	}
	return err
}
