package demo

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisServer is the Redis every instance talks to: an embedded miniredis
// or a server named by URL. Each app instance gets its own client (its own
// connection pool) from newClient.
type redisServer struct {
	// Label names the server in reports: "embedded", or the URL with any
	// password redacted.
	Label string

	opts redis.UniversalOptions
	mini *miniredis.Miniredis // nil unless embedded
}

// openRedis starts an embedded Redis when rawURL is empty, or parses rawURL
// and checks that the server answers. rawURL is a redis:// or rediss:// URL;
// a Cluster is given by more addresses, either as go-redis's cluster URLs
// take them (redis://h1:p1?addr=h2:p2&addr=h3:p3) or as a comma-separated
// list (redis://h1:p1,h2:p2); a single address of a Cluster node is
// recognised too (INFO cluster).
func openRedis(ctx context.Context, rawURL string) (*redisServer, error) {
	s := &redisServer{}
	if rawURL == "" {
		m, err := miniredis.Run() // listens on 127.0.0.1, a free port
		if err != nil {
			return nil, fmt.Errorf("demo: start embedded Redis: %w", err)
		}
		m.ClockTTL(true) // TTLs run on the wall clock, as on a real server
		s.Label, s.mini = "embedded", m
		s.opts = redis.UniversalOptions{Addrs: []string{m.Addr()}}
	} else {
		opts, err := parseRedis(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		s.Label = redactURL(rawURL)
		s.opts = opts
	}
	c := redis.NewUniversalClient(&s.opts)
	defer c.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		s.Close()
		return nil, fmt.Errorf("demo: cannot reach Redis at %s: %w", s.Label, err)
	}
	return s, nil
}

// parseRedis turns --redis into client options, for one server or a Cluster.
func parseRedis(ctx context.Context, raw string) (redis.UniversalOptions, error) {
	first, rest, _ := strings.Cut(raw, ",")
	var opts redis.UniversalOptions
	if u, err := url.Parse(first); err == nil && u.Query().Has("addr") {
		co, err := redis.ParseClusterURL(first)
		if err != nil {
			return opts, fmt.Errorf("demo: --redis: %w", err)
		}
		o := &redis.Options{Username: co.Username, Password: co.Password, TLSConfig: co.TLSConfig}
		opts = universalOptions(o)
		opts.Addrs = co.Addrs
	} else {
		o, err := redis.ParseURL(first)
		if err != nil {
			return opts, fmt.Errorf("demo: --redis: %w", err)
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
				return opts, fmt.Errorf("demo: --redis: %w", err)
			}
			a = o.Addr
		}
		opts.Addrs = append(opts.Addrs, a)
	}
	if len(opts.Addrs) == 1 { // one address: maybe a Cluster node
		c := redis.NewClient(opts.Simple())
		defer c.Close()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if info, err := c.Info(pctx, "cluster").Result(); err == nil && strings.Contains(info, "cluster_enabled:1") {
			opts.IsClusterMode = true
		}
	}
	return opts, nil
}

// universalOptions carries what redis.ParseURL understood over to the
// options of redis.NewUniversalClient, which also take Cluster and Sentinel
// addresses.
func universalOptions(o *redis.Options) redis.UniversalOptions {
	return redis.UniversalOptions{
		Addrs:           []string{o.Addr},
		ClientName:      o.ClientName,
		DB:              o.DB,
		Protocol:        o.Protocol,
		Username:        o.Username,
		Password:        o.Password,
		TLSConfig:       o.TLSConfig,
		MaxRetries:      o.MaxRetries,
		MinRetryBackoff: o.MinRetryBackoff,
		MaxRetryBackoff: o.MaxRetryBackoff,
		DialTimeout:     o.DialTimeout,
		ReadTimeout:     o.ReadTimeout,
		WriteTimeout:    o.WriteTimeout,
		PoolFIFO:        o.PoolFIFO,
		PoolSize:        o.PoolSize,
		PoolTimeout:     o.PoolTimeout,
		MinIdleConns:    o.MinIdleConns,
		MaxIdleConns:    o.MaxIdleConns,
		MaxActiveConns:  o.MaxActiveConns,
		ConnMaxIdleTime: o.ConnMaxIdleTime,
		ConnMaxLifetime: o.ConnMaxLifetime,
	}
}

// redactURL hides the password of a Redis URL, for reports.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// newClient returns a new client of the server, with its own connection
// pool, and the counter of the commands it sends. Like the client of an app
// instance that has been running, it has a connection open before the
// stampede: the PING that opens it is connection set-up, sent before the
// counter is attached, for every strategy alike.
func (s *redisServer) newClient() (redis.UniversalClient, *commandCounter) {
	c := redis.NewUniversalClient(&s.opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = c.Ping(ctx).Err() // a failure shows in the run's own errors
	cancel()
	n := &commandCounter{}
	c.AddHook(n)
	return c, n
}

// Close stops the embedded server, if any.
func (s *redisServer) Close() {
	if s.mini != nil {
		s.mini.Close()
	}
}
