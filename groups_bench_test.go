package corral_test

import (
	"context"
	"slices"
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
	o := &corral.Options{Logger: quiet, DisableEarlyRefresh: true, Prefix: "bench-ratio"}
	if near {
		o.NearCache = corral.NearCacheOptions{Size: 4 * hitKeys, TTL: time.Hour}
	}
	c := corral.Must(corral.New(benchClient(b), o))
	defer c.Close()
	ctx := context.Background()
	if err := c.Clear(ctx); err != nil {
		b.Fatal(err)
	}
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
		fetch := func(key string) error { _, err := c.FetchEntry(ctx, key, kind.load); return err }
		if near {
			warmNearKeys(b, c, kind.prefix, fetch)
			continue
		}
		for i := range hitKeys {
			if err := fetch(kind.prefix + strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if checked {
		if err := c.InvalidateTags(ctx, "unrelated"); err != nil {
			b.Fatal(err)
		}
	}
	const block = 10
	var us, ts []time.Duration
	k := 0
	names := func(p string) []string { // built before the timed blocks
		ks := make([]string, hitKeys)
		for i := range ks {
			ks[i] = p + strconv.Itoa(i)
		}
		return ks
	}
	ukeys, tkeys := names(prefix+"u:"), names(prefix+"t:")
	run := func(keys []string, load func(context.Context) (corral.Entry, error)) time.Duration {
		t := time.Now()
		for i := range block {
			if v, err := c.FetchEntry(ctx, keys[(k+i)%hitKeys], load); err != nil || len(v) != len(benchValue) {
				b.Fatal(err)
			}
		}
		return time.Since(t)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n += 2 * block {
		us = append(us, run(ukeys, plain))
		ts = append(ts, run(tkeys, tagged))
		k += block
	}
	b.StopTimer()
	slices.Sort(us)
	slices.Sort(ts)
	u, t := us[len(us)/2], ts[len(ts)/2]
	b.ReportMetric(float64(u)/block, "untagged-ns/op")
	b.ReportMetric(float64(t)/block, "3-tags-ns/op")
	b.ReportMetric(float64(t)/float64(u), "x-untagged")
}
