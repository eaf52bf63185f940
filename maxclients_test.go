package corral_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
)

// A Redis at maxclients refuses each new connection with "max number of
// clients reached" and closes it: the Cache fails open at once, and its
// warning, its errors and Health name that reason, not "broken pipe".
func TestMaxClientsIsNamed(t *testing.T) {
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
