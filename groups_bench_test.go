package corral_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

// BenchmarkGroupsHit compares hits of FetchEntry entries with three tags
// to hits of untagged ones, from Redis and from the near cache, in one
// run: what the group invalidations' check costs a hit (issue 26's
// targets: a tagged Redis hit at most 1.15x an untagged one, a near hit
// within 10%). A Clear was made first, so every hit checks its entry
// against a Clear's epoch too. In 3-tags-checked, another tag was
// invalidated after the entries were loaded, so that every hit checks
// its three tags' records too (the records read, and kept fresh in the
// background).
func BenchmarkGroupsHit(b *testing.B) {
	three := []string{"product:42", "tenant:7", "catalog"}
	for _, near := range []bool{false, true} {
		for _, v := range []struct {
			name    string
			tags    []string
			checked bool
		}{{"untagged", nil, false}, {"3-tags", three, false}, {"3-tags-checked", three, true}} {
			name := "redis/" + v.name
			if near {
				name = "near/" + v.name
			}
			b.Run(name, func(b *testing.B) { groupsHit(b, near, v.tags, v.checked) })
		}
	}
}

func groupsHit(b *testing.B, near bool, tags []string, checked bool) {
	o := &corral.Options{Logger: quiet, DisableEarlyRefresh: true, Prefix: "bench-groups"}
	if near {
		o.NearCache = corral.NearCacheOptions{Size: 2 * hitKeys, TTL: time.Hour}
	}
	c := corral.Must(corral.New(benchClient(b), o))
	defer c.Close()
	ctx := context.Background()
	if err := c.Clear(ctx); err != nil {
		b.Fatal(err)
	}
	load := func(context.Context) (corral.Entry, error) {
		return corral.Entry{Value: benchValue, TTL: time.Hour, Tags: tags}, nil
	}
	prefix := "bench:groups:" + b.Name() + ":"
	fetch := func(key string) error { _, err := c.FetchEntry(ctx, key, load); return err }
	if near {
		warmNearKeys(b, c, prefix, fetch)
	} else {
		for i := range hitKeys {
			if err := fetch(prefix + strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if checked {
		if err := c.InvalidateTags(ctx, "unrelated"); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(benchValue)))
	b.ReportAllocs()
	b.ResetTimer()
	parallelKeys(b, prefix, func(key string) {
		if v, err := c.FetchEntry(ctx, key, load); err != nil || len(v) != len(benchValue) {
			b.Fatal(err)
		}
	})
}
