package corral_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
)

// A key of another Redis type at an entry's name (a string or a list left
// by another program, or a prefix clash) is a miss that the next commit
// replaces: one load, then hits; Set succeeds and Get returns what it set;
// Get of such a key is ErrMiss; a warning names the key and the type, once.
func TestForeignKeyAtAnEntrysName(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	var logs testkit.Buffer
	c := newCache(t, srv.Client(), &corral.Options{Logger: slogTo(&logs)})
	name := func(key string) string { return wire.EntryName("corral", key) }
	if err := admin.Set(ctx, name("k"), "another program's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.RPush(ctx, name("list"), "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, name("read"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}

	var loads atomic.Int32
	for i := range 5 {
		v, err := c.Fetch(ctx, "k", time.Hour, slow(0, &loads, "v"))
		if err != nil || string(v) != "v" {
			t.Fatalf("Fetch %d over a string at the entry's name = %q, %v; want the loader's value", i+1, v, err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads for 5 Fetches; want 1, then hits", n)
	}
	if kind := admin.Type(ctx, name("k")).Val(); kind != "hash" {
		t.Fatalf("the entry's type after the commit: %s; want corral's hash, the string replaced", kind)
	}
	if st := c.Stats(); st.Hits != 4 || st.FailOpens != 0 {
		t.Fatalf("stats %+v; want 4 hits, no fail-open", st)
	}

	if err := c.Set(ctx, "list", []byte("set"), time.Hour); err != nil {
		t.Fatalf("Set over a list at the entry's name: %v; want it replaced", err)
	}
	if v, err := c.Get(ctx, "list"); err != nil || string(v) != "set" {
		t.Fatalf("Get after the Set = %q, %v; want what it set", v, err)
	}
	if _, err := c.Get(ctx, "read"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get over a string at the entry's name: %v; want ErrMiss", err)
	}

	eventually(t, 5*time.Second, "the warning", func() bool { return strings.Contains(logs.String(), "a key of another type") })
	out := logs.String()
	// The type is read apart, after the peek: by then the load that followed
	// may have replaced the string.
	named := strings.Contains(out, "type=string") || strings.Contains(out, `type="not a hash (replaced since)"`)
	if n := strings.Count(out, "a key of another type"); n != 1 || !strings.Contains(out, "key=k ") || !named {
		t.Fatalf("%d warnings; want one naming the key and its type:\n%s", n, out)
	}
}
