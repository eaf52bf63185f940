package corral

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// A client Redis does not accept (a wrong password, none where one is
// required, a database index out of range) is not a user lacking rights:
// the rights check reports no missing right, and the pub/sub mode is not
// settled on such a reply (it was: "none", with a warning that the ACL
// user may not publish). A user without channel rights is still reported.
func TestRightsCheckRefusedClient(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "nochan", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "nopub", "on", ">pw", "~*", "&*", "+@all", "-publish", "-spublish").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		opts  func(*redis.Options)
		reply string // in pubsub's error; "" for a client Redis accepts
		log   string // what the rights check logs; "" for nothing
	}{
		{"wrong password", func(o *redis.Options) { o.Password = "wrong" }, "WRONGPASS", ""},
		{"no password", func(o *redis.Options) {}, "NOAUTH", ""},
		{"database out of range", func(o *redis.Options) { o.Password, o.DB = "right", 99 }, "DB index is out of range", ""},
		{"no channel rights", func(o *redis.Options) { o.Username, o.Password = "nochan", "pw" }, "", "may not publish on corral's channels"},
		{"no PUBLISH right", func(o *redis.Options) { o.Username, o.Password = "nopub", "pw" }, "", "grant=+publish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged testkit.Buffer
			c, err := New(srv.Client(tc.opts, fastClient), &Options{RedisTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatal(err)
			}
			c.warn.checks.CheckRights(ctx)
			mode, err := c.store.pubsub(ctx)
			if tc.reply == "" && err != nil || tc.reply != "" && (err == nil || !strings.Contains(err.Error(), tc.reply)) {
				t.Errorf("pub/sub mode = %+v, %v; want an error with %q", mode, err, tc.reply)
			}
			c.Close() // its warm-up, and any check it started, are over
			// A refused client trips the breaker, which says so; the rights
			// check says nothing of it.
			out := logged.String()
			var warned []string
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "level=WARN") && !strings.Contains(line, "circuit breaker open") {
					warned = append(warned, line)
				}
			}
			if tc.log == "" && len(warned) > 0 || !strings.Contains(out, tc.log) {
				t.Errorf("logged %q; want %q", out, tc.log)
			}
		})
	}
}

// fastClient makes a client bound its reads by the context, as the README
// says to: New's warning of the slow client stays out of the logs these
// tests read.
func fastClient(o *redis.Options) { o.ContextTimeoutEnabled = true }
