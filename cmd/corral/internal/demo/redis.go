package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/corralhq/corral/internal/redisurl"
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
// and checks that the server answers. rawURL is a redis:// or rediss:// URL,
// or a Cluster's addresses, as redisurl.Parse takes them.
func openRedis(ctx context.Context, rawURL string) (*redisServer, error) {
	s := &redisServer{}
	if rawURL == "" {
		m, err := miniredis.Run() // listens on 127.0.0.1, a free port
		if err != nil {
			return nil, fmt.Errorf("demo: start embedded Redis: %w", err)
		}
		m.ClockTTL(true) // TTLs run on the wall clock, as on a real server
		s.Label, s.mini = "embedded", m
		s.opts = redis.UniversalOptions{Addrs: []string{m.Addr()}, ContextTimeoutEnabled: true}
	} else {
		opts, err := redisurl.Parse(ctx, rawURL)
		if err != nil {
			return nil, fmt.Errorf("demo: --redis: %w", err)
		}
		s.Label = redisurl.Redact(rawURL)
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
