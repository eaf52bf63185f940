package corral_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// A Redis at maxclients refuses each new connection with "max number of
// clients reached" and closes it: the Cache fails open at once, and its
// warning, its errors and Health name that reason, not "broken pipe".
func TestMaxClientsIsNamed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Ping(ctx).Err(); err != nil { // admin's connection is the one left
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxclients", "1").Err(); err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	c := newCache(t, quickStartClient(t, srv.Addr), &corral.Options{Logger: slogTo(&logs)})
	if v, err := c.Fetch(ctx, "k", time.Minute, value("v")); err != nil || string(v) != "v" {
		t.Fatalf("Fetch with Redis at maxclients = %q, %v; want the loader's value", v, err)
	}
	eventually(t, 5*time.Second, "Health naming maxclients", func() bool {
		err := c.Health()
		return err != nil && strings.Contains(err.Error(), "max number of clients reached")
	})
	if _, err := c.Get(ctx, "not held"); err == nil || !strings.Contains(err.Error(), "max number of clients reached") {
		t.Fatalf("Get with Redis at maxclients: %v; want the reason named", err)
	}
	if out := logs.String(); !strings.Contains(out, "max number of clients reached") {
		t.Fatalf("the warnings do not name the reason:\n%s", out)
	}
}

// Check, and so corral check, names a Redis at maxclients and the fix,
// whether its first PING is refused or a later step's new connection
// (a subscription) is: not "unreachable" nor "broken pipe".
func TestCheckNamesMaxClients(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxclients", "2")
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.Ping(ctx).Err(); err != nil { // one slot
		t.Fatal(err)
	}
	held := quickStartClient(t, srv.Addr)
	if err := held.Ping(ctx).Err(); err != nil { // the other, kept in held's pool
		t.Fatal(err)
	}
	for name, rdb := range map[string]*redis.Client{
		"a new client":                   quickStartClient(t, srv.Addr),
		"a client holding the last slot": held,
		"a client that does not retry":   srv.Client(func(o *redis.Options) { o.MaxRetries = -1 }),
	} {
		r, err := corral.Check(ctx, rdb, nil)
		if r != nil || err == nil || !strings.Contains(err.Error(), "max number of clients reached") ||
			!strings.Contains(err.Error(), "raise maxclients") {
			t.Errorf("Check with %s at maxclients = %v, %v; want no report, and the error naming maxclients and the fix", name, r, err)
			continue
		}
		sayOnce(t, "Check with "+name+" at maxclients", err)
	}
}
