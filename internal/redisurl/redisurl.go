// Package redisurl turns the --redis URL of corral's commands into go-redis
// client options, for one server or a Cluster, and redacts it for reports.
package redisurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// detectTimeout bounds the look at a single address that tells a Cluster
// node from a lone server.
const detectTimeout = 5 * time.Second

// Parse turns raw into client options. raw is a redis:// or rediss:// URL
// (with a user and password if needed); a Cluster is given by more
// addresses, either as go-redis's cluster URLs take them
// (redis://h1:p1?addr=h2:p2&addr=h3:p3) or as a comma-separated list
// (redis://h1:p1,h2:p2). A single address of a Cluster node is recognised
// too: Parse asks the server (HELLO, or INFO cluster) and sets
// IsClusterMode. A server that does not answer is taken for a lone one:
// the caller's first command says why. Errors never quote the user name or
// password: a value whose user information does not parse (a /, #, ? or
// comma in a password, which must be percent-encoded) gets ErrUnparsable.
func Parse(ctx context.Context, raw string) (redis.UniversalOptions, error) {
	var opts redis.UniversalOptions
	first, rest, _ := strings.Cut(raw, ",")
	scheme, host, isURL := strings.Cut(first, "://")
	if !isURL {
		return opts, noScheme(raw, first)
	}
	if s := strings.ToLower(scheme); s != "redis" && s != "rediss" && s != "unix" {
		return opts, notRedis(raw, scheme, host)
	}
	if err := screen(raw); err != nil {
		return opts, err
	}
	if u, err := url.Parse(first); err == nil && u.Query().Has("addr") {
		co, err := redis.ParseClusterURL(first)
		if err != nil {
			return opts, redacted(err)
		}
		o := &redis.Options{Username: co.Username, Password: co.Password, TLSConfig: co.TLSConfig}
		opts = universalOptions(o)
		opts.Addrs = co.Addrs
	} else {
		o, err := redis.ParseURL(first)
		if err != nil {
			return opts, redacted(err)
		}
		opts = universalOptions(o)
	}
	for _, a := range strings.Split(rest, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if strings.Contains(a, "://") { // a URL: take its host:port
			o, err := redis.ParseURL(a)
			if err != nil {
				return opts, redacted(err)
			}
			a = o.Addr
		}
		opts.Addrs = append(opts.Addrs, a)
	}
	if len(opts.Addrs) == 1 {
		opts.IsClusterMode = clusterNode(ctx, opts)
	}
	return opts, nil
}

// ErrNoScheme is the error of a --redis value that is not a URL: a bare
// host:port, say.
var ErrNoScheme = errors.New("not a URL: it has no scheme")

// noScheme is ErrNoScheme for raw, whose first address is first, naming
// the fix: redis:// before it. It quotes first only when raw holds no @
// (which may mean a password, with a comma or a slash in it, say).
func noScheme(raw, first string) error {
	if strings.Contains(raw, "@") {
		return fmt.Errorf("%w (no part of it is shown: it may hold the password); write redis://user:password@host:port (rediss:// for TLS)", ErrNoScheme)
	}
	return fmt.Errorf("%w (%q); write redis://%s (rediss://%s for TLS)", ErrNoScheme, first, first, first)
}

// ErrNotRedis is the error of a --redis URL whose scheme is not Redis's
// (http://, say).
var ErrNotRedis = errors.New("not a Redis URL")

// notRedis is ErrNotRedis for raw, whose first URL has the scheme scheme and
// host (and what follows) after it, naming the fix: redis:// instead. It
// quotes host only when raw holds no @ (which may mean a password).
func notRedis(raw, scheme, host string) error {
	if strings.Contains(raw, "@") {
		return fmt.Errorf("%w: its scheme is %q (no other part is shown: it may hold the password); write redis://user:password@host:port (rediss:// for TLS)", ErrNotRedis, scheme)
	}
	return fmt.Errorf("%w: its scheme is %q; write redis://%s (rediss://%s for TLS)", ErrNotRedis, scheme, host, host)
}

// ErrUnparsable is the error of a --redis value whose user name or
// password (or what may be one) stops it from parsing. It quotes no part
// of the value: net/url's own errors would quote a piece of the password.
var ErrUnparsable = errors.New("the URL does not parse (no part of it is shown: it may hold the password); " +
	"percent-encode the special characters of the user name and password: / as %2F, # as %23, ? as %3F, @ as %40, ',' as %2C, % as %25")

// screen returns ErrUnparsable when a part of raw (split at commas) would
// parse with part of its user information taken for something else, or
// not at all. A URL's user information ends at the last @ of its authority
// (between :// and the first /, ? or #): an @ past the authority means a
// /, ? or # in the password; an @ in a part without :// a comma in it (or
// no scheme); an escape that does not decode, a % in it. The parts it lets
// through put their user information where net/url and go-redis take it,
// so their errors, which quote the host, path or query, quote none of it.
func screen(raw string) error {
	for _, p := range strings.Split(raw, ",") {
		scheme, rest, isURL := strings.Cut(p, "://")
		if !isURL || strings.Contains(scheme, "@") {
			if strings.Contains(p, "@") {
				return ErrUnparsable
			}
			continue
		}
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if strings.Contains(rest[end:], "@") {
			return ErrUnparsable
		}
		if i := strings.LastIndex(rest[:end], "@"); i >= 0 {
			if _, err := url.PathUnescape(rest[:i]); err != nil {
				return ErrUnparsable
			}
		}
	}
	return nil
}

// redacted returns err without the URL that net/url puts in its errors
// (with the password in it). screen has made sure that what remains
// quotes no user information.
func redacted(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("invalid URL: %w", ue.Err)
	}
	return err
}

// clusterNode reports whether the one server of opts says it is a Cluster
// node: HELLO's mode, which any user may ask, or INFO cluster.
func clusterNode(ctx context.Context, opts redis.UniversalOptions) bool {
	o := opts.Simple()
	o.MaxRetries = -1 // a look, not a call that must land
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, detectTimeout)
	defer cancel()
	hello, err := c.Do(ctx, "HELLO").Result()
	var reply redis.Error
	switch {
	case err == nil:
		return Field(hello, "mode") == "cluster"
	case !errors.As(err, &reply):
		return false // no answer
	}
	info, err := c.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

// Field returns a field of a HELLO reply: a map with RESP3, a flat list of
// names and values with RESP2. It returns "" when the reply lacks it.
func Field(hello any, name string) string {
	switch h := hello.(type) {
	case map[any]any:
		if v, ok := h[name]; ok {
			return fmt.Sprint(v)
		}
	case []any:
		for i := 0; i+1 < len(h); i += 2 {
			if fmt.Sprint(h[i]) == name {
				return fmt.Sprint(h[i+1])
			}
		}
	}
	return ""
}

// universalOptions carries what redis.ParseURL understood over to the
// options of redis.NewUniversalClient, which also take Cluster and Sentinel
// addresses.
func universalOptions(o *redis.Options) redis.UniversalOptions {
	return redis.UniversalOptions{
		// A call's context bounds its reads: corral reads hits in the
		// calling goroutine (its transport's inline reads).
		ContextTimeoutEnabled: true,
		Addrs:                 []string{o.Addr},
		ClientName:            o.ClientName,
		DB:                    o.DB,
		Protocol:              o.Protocol,
		Username:              o.Username,
		Password:              o.Password,
		TLSConfig:             o.TLSConfig,
		MaxRetries:            o.MaxRetries,
		MinRetryBackoff:       o.MinRetryBackoff,
		MaxRetryBackoff:       o.MaxRetryBackoff,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		PoolFIFO:              o.PoolFIFO,
		PoolSize:              o.PoolSize,
		PoolTimeout:           o.PoolTimeout,
		MinIdleConns:          o.MinIdleConns,
		MaxIdleConns:          o.MaxIdleConns,
		MaxActiveConns:        o.MaxActiveConns,
		ConnMaxIdleTime:       o.ConnMaxIdleTime,
		ConnMaxLifetime:       o.ConnMaxLifetime,
	}
}

// Redact returns raw with every password in it hidden, for reports; a part
// that does not parse as a URL is not shown at all, nor is anything when
// Parse would refuse raw with ErrUnparsable.
func Redact(raw string) string {
	if screen(raw) != nil {
		return "(unparsable URL)"
	}
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		if i > 0 && !strings.Contains(p, "://") {
			continue // a bare host:port
		}
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "(unparsable URL)"
			continue
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}
