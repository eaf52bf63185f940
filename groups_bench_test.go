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

// clearedCache is a group benchmark's Cache under prefix, with a near
// cache of size copies when near is set, closed when b ends; a Clear was
// made, so that every hit checks its entry against a Clear's epoch.
func clearedCache(b *testing.B, prefix string, near bool, size int) *corral.Cache {
	o := &corral.Options{Logger: quiet, DisableEarlyRefresh: true, Prefix: prefix}
	if near {
		o.NearCache = corral.NearCacheOptions{Size: size, TTL: time.Hour}
	}
	c := corral.Must(corral.New(benchClient(b), o))
	b.Cleanup(func() { c.Close() })
	if err := c.Clear(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c
}

func groupsHit(b *testing.B, near bool, tags []string, checked bool) {
	c := clearedCache(b, "bench-groups", near, 2*hitKeys)
	ctx := context.Background()
	load := func(context.Context) (corral.Entry, error) {
		return corral.Entry{Value: benchValue, TTL: time.Hour, Tags: tags}, nil
	}
	prefix := "bench:groups:" + b.Name() + ":"
	fetch := func(key string) error { _, err := c.FetchEntry(ctx, key, load); return err }
	warmed(b, c, near, prefix, fetch)
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

// BenchmarkGroupsHitRatio is BenchmarkGroupsHit's comparison made as
// BenchmarkHitVsRawGet makes its own: one Cache (a Clear made first, so
// that every hit checks the Clear's epoch), hits of untagged entries and of
// entries with three tags alternating in blocks of 10 in one goroutine, the
// medians' ratio reported as x-untagged (issue 26's targets: at most 1.15
// from Redis, within 10% from the near cache). In checked, an unrelated tag
// was invalidated after the entries were loaded: every tagged hit looks its
// tags up. -benchtime 40000x or more.
func BenchmarkGroupsHitRatio(b *testing.B) {
	three := []string{"product:42", "tenant:7", "catalog"}
	for _, where := range []string{"redis", "near"} {
		for _, checked := range []bool{false, true} {
			name := where
			if checked {
				name += "/checked"
			}
			b.Run(name, func(b *testing.B) { groupsHitRatio(b, where == "near", three, checked) })
		}
	}
}

func groupsHitRatio(b *testing.B, near bool, tags []string, checked bool) {
	c := clearedCache(b, "bench-ratio", near, 4*hitKeys)
	ctx := context.Background()
	loader := func(tags []string) func(context.Context) (corral.Entry, error) {
		return func(context.Context) (corral.Entry, error) {
			return corral.Entry{Value: benchValue, TTL: time.Hour, Tags: tags}, nil
		}
	}
	plain, tagged := loader(nil), loader(tags)
	prefix := "bench:ratio:" + b.Name() + ":"
	for _, kind := range []struct {
		prefix string
		load   func(context.Context) (corral.Entry, error)
	}{{prefix + "u:", plain}, {prefix + "t:", tagged}} {
		warmed(b, c, near, kind.prefix, func(key string) error { _, err := c.FetchEntry(ctx, key, kind.load); return err })
	}
	if checked {
		if err := c.InvalidateTags(ctx, "unrelated"); err != nil {
			b.Fatal(err)
		}
	}
	names := func(p string) []string { // built before the timed blocks
		ks := make([]string, hitKeys)
		for i := range ks {
			ks[i] = p + strconv.Itoa(i)
		}
		return ks
	}
	ukeys, tkeys := names(prefix+"u:"), names(prefix+"t:")
	hit := func(keys []string, load func(context.Context) (corral.Entry, error)) func(int) {
		return func(i int) {
			if v, err := c.FetchEntry(ctx, keys[i], load); err != nil || len(v) != len(benchValue) {
				b.Fatal(err)
			}
		}
	}
	u, t := alternated(b, hit(ukeys, plain), hit(tkeys, tagged))
	b.ReportMetric(float64(u), "untagged-ns/op")
	b.ReportMetric(float64(t), "3-tags-ns/op")
	b.ReportMetric(float64(t)/float64(u), "x-untagged")
}
