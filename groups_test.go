package corral_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// tagged returns a FetchEntry loader that counts its runs in n and returns
// "<s>#<run>" tagged with tags, for a minute.
func tagged(n *atomic.Int32, s string, tags ...string) func(context.Context) (corral.Entry, error) {
	return func(context.Context) (corral.Entry, error) {
		run := n.Add(1)
		return corral.Entry{Value: []byte(s + "#" + strconv.Itoa(int(run))), TTL: time.Minute, Tags: tags}, nil
	}
}

// fleet returns n Caches on srv, each with a client of its own, as n
// processes would have.
func fleet(t *testing.T, srv *redistest.Server, n int, opts func() *corral.Options) []*corral.Cache {
	cs := make([]*corral.Cache, n)
	for i := range cs {
		var o *corral.Options
		if opts != nil {
			o = opts()
		}
		cs[i] = newCache(t, srv.Client(), o)
	}
	return cs
}

// afterCoherence fetches key through c until a call that began Coherence
// after since returns; it fails the test if such a call got old (a value
// loaded before the invalidation that returned at since), and returns the
// last value.
func afterCoherence(t *testing.T, c *corral.Cache, key string, load func(context.Context) (corral.Entry, error), old string) string {
	t.Helper()
	return untilCoherent(t, old, func() ([]byte, error) { return c.FetchEntry(context.Background(), key, load) })
}

// untilCoherent calls fetch until it returns something other than old,
// failing the test if a call that began Coherence after the first got old.
func untilCoherent(t *testing.T, old string, fetch func() ([]byte, error)) string {
	t.Helper()
	since := time.Now()
	for deadline := since.Add(10 * time.Second); ; {
		began := time.Now()
		v, err := fetch()
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != old {
			return string(v)
		}
		if began.Sub(since) > corral.Coherence {
			t.Fatalf("a call that began %v after the invalidation returned got %q, loaded before it", began.Sub(since), v)
		}
		if time.Now().After(deadline) {
			t.Fatal("the invalidation never reached this process")
		}
	}
}

// InvalidateTags: the calling process never serves a tagged entry loaded
// before it (near copies included), another process within Coherence;
// entries of other tags are untouched.
func TestInvalidateTags_ReadBack(t *testing.T) {
	t.Parallel()
	for _, nearOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("near=%v", nearOn), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cs := fleet(t, srv, 2, func() *corral.Options {
				o := &corral.Options{}
				if nearOn {
					o.NearCache = corral.NearCacheOptions{Size: 1000}
				}
				return o
			})
			a, b := cs[0], cs[1]
			ctx := context.Background()
			var loads, others atomic.Int32
			load := tagged(&loads, "p", "product:42", "tenant:7")
			other := tagged(&others, "q", "product:43")
			for _, c := range cs {
				for range 3 { // loaded once, then hits (near hits too)
					if v, err := c.FetchEntry(ctx, "p", load); err != nil || string(v) != "p#1" {
						t.Fatalf("FetchEntry = %q, %v; want p#1", v, err)
					}
					if _, err := c.FetchEntry(ctx, "q", other); err != nil {
						t.Fatal(err)
					}
				}
			}
			if loads.Load() != 1 || others.Load() != 1 {
				t.Fatalf("%d and %d loads before the invalidation; want 1 each", loads.Load(), others.Load())
			}
			if err := a.InvalidateTags(ctx, "product:42"); err != nil {
				t.Fatal(err)
			}
			if v, err := a.FetchEntry(ctx, "p", load); err != nil || string(v) != "p#2" {
				t.Fatalf("the invalidating process's next call = %q, %v; want p#2, loaded again", v, err)
			}
			if v := afterCoherence(t, b, "p", load, "p#1"); v != "p#2" {
				t.Fatalf("the other process got %q; want p#2, the one reload", v)
			}
			for _, c := range cs {
				if v, err := c.FetchEntry(ctx, "q", other); err != nil || string(v) != "q#1" {
					t.Fatalf("an entry of another tag = %q, %v; want q#1, untouched", v, err)
				}
			}
			if loads.Load() != 2 || others.Load() != 1 {
				t.Fatalf("%d and %d loads; want 2 and 1", loads.Load(), others.Load())
			}
			if s := a.Stats(); s.TagInvalidations != 1 {
				t.Fatalf("Stats.TagInvalidations = %d; want 1", s.TagInvalidations)
			}
		})
	}
}

// A load that began before InvalidateTags returned cannot make its result
// servable after it: not in another process, not to a waiter that began
// after, not to a later call here.
func TestInvalidateTags_LoadInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cs := fleet(t, srv, 3, nil)
	a, b, w := cs[0], cs[1], cs[2]
	ctx := context.Background()
	release, first := blockedLoad(a, "k", "t")
	if err := b.InvalidateTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	// A waiter that begins after the invalidation, on a's lease.
	waited := make(chan string, 1)
	parked := make(chan struct{})
	var once sync.Once
	corral.SetOnParked(w, func(string) { once.Do(func() { close(parked) }) })
	var after atomic.Int32
	go func() {
		v, err := w.FetchEntry(ctx, "k", tagged(&after, "after", "t"))
		waited <- fmt.Sprintf("%s %v", v, err)
	}()
	<-parked
	close(release)
	if got := <-first; got != "before <nil>" {
		t.Fatalf("the load's own caller = %s; want before (its call began before the invalidation)", got)
	}
	if got := <-waited; got != "after#1 <nil>" {
		t.Fatalf("a waiter that began after the invalidation = %s; want after#1, loaded anew", got)
	}
	for _, c := range cs {
		if v, err := c.FetchEntry(ctx, "k", tagged(&after, "after", "t")); err != nil || string(v) == "before" {
			t.Fatalf("a later call = %q, %v; want what was loaded after the invalidation", v, err)
		}
	}
}

// blockedLoad starts c.FetchEntry of key with a loader that, once it runs,
// waits for release and returns "before" tagged tag; it returns when the
// loader runs, with release and the call's result ("<value> <err>").
func blockedLoad(c *corral.Cache, key, tag string) (release chan struct{}, result chan string) {
	started := make(chan struct{})
	release, result = make(chan struct{}), make(chan string, 1)
	go func() {
		v, err := c.FetchEntry(context.Background(), key, func(context.Context) (corral.Entry, error) {
			close(started)
			<-release
			return corral.Entry{Value: []byte("before"), TTL: time.Minute, Tags: []string{tag}}, nil
		})
		result <- fmt.Sprintf("%s %v", v, err)
	}()
	<-started
	return release, result
}

// Clear: every entry of the prefix is invalidated, other prefixes are not,
// and the cleared entries are deleted in the background.
func TestClear_ThousandsOfEntries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	c := newCache(t, rdb, nil)
	other := newCache(t, srv.Client(), &corral.Options{Prefix: "other"})
	peer := newCache(t, srv.Client(), nil)
	ctx := context.Background()
	const n = 3000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	var loads atomic.Int32
	loadMany := func(_ context.Context, ks []string) (map[string][]byte, error) {
		loads.Add(int32(len(ks)))
		m := make(map[string][]byte, len(ks))
		for _, k := range ks {
			m[k] = []byte("v")
		}
		return m, nil
	}
	if _, err := c.FetchMany(ctx, keys, time.Hour, loadMany); err != nil {
		t.Fatal(err)
	}
	if _, err := other.FetchMany(ctx, keys[:10], time.Hour, loadMany); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	before := loads.Load()
	if _, err := c.FetchMany(ctx, keys[:100], time.Hour, loadMany); err != nil {
		t.Fatal(err)
	}
	if got := loads.Load() - before; got != 100 {
		t.Fatalf("%d loads of 100 cleared keys; want 100", got)
	}
	before = loads.Load()
	if _, err := other.FetchMany(ctx, keys[:10], time.Hour, loadMany); err != nil || loads.Load() != before {
		t.Fatalf("another prefix's keys were loaded again (%d loads, %v): Clear must leave them", loads.Load()-before, err)
	}
	var peerLoads atomic.Int32
	if v := afterCoherenceBytes(t, peer, "k500", &peerLoads); v != "fresh" {
		t.Fatalf("another process got %q after the Clear; want a reload", v)
	}
	// The sweep deletes what nobody reads again: of the 3,000 entries,
	// those not fetched since (2,899) go.
	testkit.Eventually(t, 20*time.Second, "the cleared entries were not deleted by the sweep", func() bool {
		n, err := rdb.Eval(ctx, `return #redis.call('KEYS', 'corral:e:*')`, nil).Int()
		return err == nil && n <= 101
	})
	if s := c.Stats(); s.Clears != 1 {
		t.Fatalf("Stats.Clears = %d; want 1", s.Clears)
	}
}

// afterCoherenceBytes is afterCoherence for a Fetch whose loader returns
// "fresh": the entry held "v" before the invalidation.
func afterCoherenceBytes(t *testing.T, c *corral.Cache, key string, n *atomic.Int32) string {
	t.Helper()
	return untilCoherent(t, "v", func() ([]byte, error) {
		return c.Fetch(context.Background(), key, time.Hour, func(context.Context) ([]byte, error) {
			n.Add(1)
			return []byte("fresh"), nil
		})
	})
}

// Expire and ExpireTags are soft: callers get the stale value at once while
// one refresh runs; without a stale window the entry is gone.
func TestExpire_Soft(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cs := fleet(t, srv, 2, nil)
	ctx := context.Background()
	for _, how := range []string{"Expire", "ExpireTags"} {
		t.Run(how, func(t *testing.T) {
			key := "soft-" + how
			var loads atomic.Int32
			release := make(chan struct{})
			load := func(ctx context.Context) (corral.Entry, error) {
				if loads.Add(1) > 1 {
					<-release // the refresh: held until the stale answers are in
				}
				return corral.Entry{Value: []byte("v" + strconv.Itoa(int(loads.Load()))), TTL: time.Minute, StaleTTL: time.Minute, Tags: []string{"s-" + how}}, nil
			}
			if v, err := cs[0].FetchEntry(ctx, key, load); err != nil || string(v) != "v1" {
				t.Fatalf("%q, %v", v, err)
			}
			var err error
			if how == "Expire" {
				err = cs[1].Expire(ctx, key)
			} else {
				err = cs[1].ExpireTags(ctx, "s-"+how)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				c := cs[i%2]
				if how == "ExpireTags" && c == cs[0] {
					c = cs[1] // the calling process sees it at once; the other within Coherence
				}
				if v, err := c.FetchEntry(ctx, key, load); err != nil || string(v) != "v1" {
					t.Fatalf("call %d = %q, %v; want v1, stale, at once", i, v, err)
				}
			}
			close(release)
			testkit.Eventually(t, 10*time.Second, "the refresh never landed", func() bool {
				v, err := cs[1].FetchEntry(ctx, key, load)
				return err == nil && string(v) == "v2"
			})
			if n := loads.Load(); n != 2 {
				t.Fatalf("%d loads; want 2 (one refresh)", n)
			}
		})
	}
	t.Run("no stale window", func(t *testing.T) {
		var loads atomic.Int32
		if _, err := cs[0].Fetch(ctx, "hard", time.Minute, slow(0, &loads, "x")); err != nil {
			t.Fatal(err)
		}
		if err := cs[0].Expire(ctx, "hard"); err != nil {
			t.Fatal(err)
		}
		if _, err := cs[1].Get(ctx, "hard"); !errors.Is(err, corral.ErrMiss) {
			t.Fatalf("Get after Expire of an entry without a stale window = %v; want ErrMiss", err)
		}
	})
}

// Bad input: no tags, an empty tag, a NUL byte; a closed Cache.
func TestInvalidateTags_BadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		tags []string
		says string // the error names what is wrong
	}{{nil, "no tags"}, {[]string{"ok", ""}, `""`}, {[]string{"a\x00b"}, `"a\x00b"`}} {
		err := e.c.InvalidateTags(ctx, tc.tags...)
		if !errors.Is(err, corral.ErrInvalidTag) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("InvalidateTags(%q) = %v; want ErrInvalidTag saying %s", tc.tags, err, tc.says)
		}
	}
	if err := e.c.InvalidateTags(ctx, "a", "b", "a"); err != nil || e.c.Stats().TagInvalidations != 2 {
		t.Errorf("InvalidateTags(a, b, a) = %v, %d tag invalidations counted; want 2 (a repeat counts once)", err, e.c.Stats().TagInvalidations)
	}
	_, err := e.c.FetchEntry(ctx, "k", func(context.Context) (corral.Entry, error) {
		return corral.Entry{Value: []byte("v"), TTL: time.Minute, Tags: []string{""}}, nil
	})
	if !errors.Is(err, corral.ErrInvalidTag) {
		t.Errorf("a loader's empty tag = %v; want ErrInvalidTag", err)
	}
	if err := e.c.SetEntry(ctx, "k", corral.Entry{Value: []byte("v")}); !errors.Is(err, corral.ErrInvalidTTL) {
		t.Errorf("SetEntry with no TTL = %v; want ErrInvalidTTL", err)
	}
	if err := e.c.SetEntry(ctx, "k", corral.Entry{Value: []byte("v"), TTL: time.Minute, Tags: []string{"a", "{b}", "a"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.InvalidateTags(ctx, "{b}"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Get(ctx, "k"); !errors.Is(err, corral.ErrMiss) {
		t.Errorf("Get of a set entry after its tag's invalidation = %v; want ErrMiss", err)
	}
	e.c.Close()
	if err := e.c.Clear(ctx); !errors.Is(err, corral.ErrClosed) {
		t.Errorf("Clear on a closed Cache = %v; want ErrClosed", err)
	}
}

// A group invalidation cut off from Redis: its error says queued, this
// process holds what it concerns invalidated at once (never serving what it
// holds of it, from memory or from Redis), and it reaches Redis after the
// heal with no further call; another process then loads anew.
func TestOutage_GroupInvalidationDuringPartition(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"InvalidateTags", "Clear"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.Start(t)
			proxy := redistest.StartProxy(t, srv.Addr)
			opts := func() *corral.Options {
				return &corral.Options{NearCache: corral.NearCacheOptions{Size: 100}, Logger: testLogger(t)}
			}
			a := newCache(t, quickStartClient(t, proxy.Addr), opts()) // the one cut off
			b := newCache(t, srv.Client(), opts())
			ctx := context.Background()
			var loads atomic.Int32
			load := tagged(&loads, "v", "t")
			for range 3 {
				if v, err := a.FetchEntry(ctx, "k", load); err != nil || string(v) != "v#1" {
					t.Fatalf("warm-up: %q, %v", v, err)
				}
			}
			if err := proxy.Refuse(true); err != nil {
				t.Fatal(err)
			}
			var err error
			if how == "Clear" {
				err = a.Clear(ctx)
			} else {
				err = a.InvalidateTags(ctx, "t")
			}
			if err == nil || !strings.Contains(err.Error(), "queued") {
				t.Fatalf("%s while cut off = %v; want its error, saying it is queued", how, err)
			}
			if v, err := a.FetchEntry(ctx, "k", load); err != nil || string(v) == "v#1" {
				t.Fatalf("Fetch after the %s, cut off: %q, %v; want a new load (the copy invalidated)", how, v, err)
			}
			if err := proxy.Refuse(false); err != nil {
				t.Fatal(err)
			}
			healed := time.Now()
			eventually(t, 10*time.Second, "the invalidation reaches Redis", func() bool {
				v, err := b.FetchEntry(ctx, "k", load)
				return err == nil && string(v) != "v#1"
			})
			t.Logf("applied %v after the heal", time.Since(healed).Round(time.Millisecond))
			eventually(t, 10*time.Second, "the replay is counted", func() bool {
				st := a.Stats()
				return st.InvalidationsReplayed >= 1 && st.InvalidationsPending == 0
			})
		})
	}
}

// The long tail of tags: a hit on an entry born after the prefix's last
// tag invalidation reads no tag's record, even one this process never
// read (a sidecar's URL tags, one per URL); an entry born before it does.
func TestInvalidateTags_LongTailReadsNoRecord(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newCache(t, srv.Client(), nil)
	rdb := srv.Client()
	sent := &faults{}
	var mu sync.Mutex
	tagsRead := map[string]bool{} // the tags whose records b read, in a read of its own or beside a peek
	sent.setBefore(func(cmd redis.Cmder) error {
		mu.Lock()
		defer mu.Unlock()
		for _, arg := range cmd.Args() {
			if k, ok := arg.(string); ok && strings.HasPrefix(k, wire.TagName("corral", "url:")) {
				tagsRead[k] = true
			}
		}
		return nil
	})
	rdb.AddHook(sent)
	b := newCache(t, rdb, nil)
	ctx := context.Background()
	const n = 300
	if err := a.InvalidateTags(ctx, "unrelated"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		e := corral.Entry{Value: []byte("v"), TTL: time.Minute, Tags: []string{"url:" + strconv.Itoa(i)}}
		if err := a.SetEntry(ctx, "k"+strconv.Itoa(i), e); err != nil {
			t.Fatal(err)
		}
	}
	noLoad := func(context.Context) (corral.Entry, error) {
		t.Error("a load; want a hit")
		return corral.Entry{}, errors.New("no load")
	}
	hit := func(i int) {
		if v, err := b.FetchEntry(ctx, "k"+strconv.Itoa(i), noLoad); err != nil || string(v) != "v" {
			t.Fatalf("FetchEntry = %q, %v; want v", v, err)
		}
	}
	hit(n - 1) // the records read
	before := sent.commands.Load()
	hit(n - 1)
	one := sent.commands.Load() - before // a hit's commands, its tag's record fresh
	pass := func() int64 {
		before := sent.commands.Load()
		for i := range n {
			hit(i)
		}
		return sent.commands.Load() - before
	}
	if got := pass(); got > n*one+n/5 {
		t.Fatalf("%d hits on entries born after the last tag invalidation sent %d commands; one hit sends %d: the tags' records were read", n, got, one)
	}
	if err := b.InvalidateTags(ctx, "unrelated-2"); err != nil { // b: known there at once
		t.Fatal(err)
	}
	// Each hit now reads its tag's record: on its own (a command more), or
	// beside a peek with the other tags in use, which a slow machine, whose
	// first pass outlived Coherence, has many of. Counted by the tags read,
	// not by the commands.
	mu.Lock()
	clear(tagsRead)
	mu.Unlock()
	pass()
	mu.Lock()
	defer mu.Unlock()
	if len(tagsRead) < n*9/10 {
		t.Fatalf("%d hits on entries born before the last tag invalidation read %d of their tags' records; want them read", n, len(tagsRead))
	}
}

// FetchManyEntries stores each key as its Entry says (TTL, StaleTTL,
// Tags), as FetchEntry would: a tag invalidation reaches the batch's
// entries of that tag alone, across processes; an Entry with TTL <= 0 is
// returned, not stored; an invalid tag fails its key alone.
func TestFetchManyEntries_Tags(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cs := fleet(t, srv, 2, func() *corral.Options { return &corral.Options{StaleTTL: time.Minute} })
	a, b := cs[0], cs[1]
	admin := srv.Client()
	ctx := context.Background()
	var mu sync.Mutex
	loads := map[string]int{}
	loadMany := func(_ context.Context, keys []string) (map[string]corral.Entry, error) {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]corral.Entry{}
		for _, k := range keys {
			loads[k]++
			v := []byte(fmt.Sprintf("%s#%d", k, loads[k]))
			switch k {
			case "p42":
				out[k] = corral.Entry{Value: v, TTL: time.Hour, StaleTTL: -1, Tags: []string{"product:42", "catalog"}}
			case "p43":
				out[k] = corral.Entry{Value: v, TTL: 30 * time.Minute, StaleTTL: 5 * time.Minute, Tags: []string{"product:43", "catalog"}}
			case "uncached":
				out[k] = corral.Entry{Value: v}
			case "badtag":
				out[k] = corral.Entry{Value: v, TTL: time.Hour, Tags: []string{""}}
			}
		}
		return out, nil
	}
	keys := []string{"p42", "p43", "uncached", "badtag", "missing"}
	fetch := func(c *corral.Cache) map[string][]byte {
		t.Helper()
		got, err := c.FetchManyEntries(ctx, keys, loadMany)
		var be *corral.BatchError
		if !errors.As(err, &be) || len(be.Errs) != 1 || !errors.Is(be.Errs["badtag"], corral.ErrInvalidTag) {
			t.Fatalf("FetchManyEntries error = %v; want a BatchError of badtag alone, ErrInvalidTag", err)
		}
		if _, ok := got["missing"]; ok {
			t.Fatal("a key loadMany left out is in the result")
		}
		return got
	}
	first := fetch(a)
	if string(first["p42"]) != "p42#1" || string(first["p43"]) != "p43#1" || string(first["uncached"]) != "uncached#1" {
		t.Fatalf("first call = %q", first)
	}
	for key, want := range map[string][2]time.Duration{"p42": {time.Hour, time.Hour}, "p43": {30 * time.Minute, 35 * time.Minute}} {
		if soft, hard := storedTTLs(t, admin, key); !about(soft, want[0]) || !about(hard, want[1]) {
			t.Fatalf("%s stored with soft TTL %v, hard %v; want %v and %v (its Entry's)", key, soft, hard, want[0], want[1])
		}
	}
	if n := admin.Exists(ctx, entryName("uncached")).Val(); n != 0 {
		t.Fatal("an Entry with TTL 0 was stored")
	}
	if got := fetch(b); string(got["p42"]) != "p42#1" || string(got["p43"]) != "p43#1" || string(got["uncached"]) != "uncached#2" {
		t.Fatalf("the other process got %q; want p42#1 and p43#1 from Redis, uncached loaded again", got)
	}
	if err := a.InvalidateTags(ctx, "product:42"); err != nil {
		t.Fatal(err)
	}
	if got := fetch(a); string(got["p42"]) != "p42#2" || string(got["p43"]) != "p43#1" {
		t.Fatalf("after InvalidateTags(product:42): %q; want p42 loaded again, p43 untouched", got)
	}
	v := untilCoherent(t, "p42#1", func() ([]byte, error) {
		got, err := b.FetchManyEntries(ctx, []string{"p42"}, loadMany)
		return got["p42"], err
	})
	if v != "p42#2" {
		t.Fatalf("the other process got %q; want p42#2, the one reload", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if loads["p42"] != 2 || loads["p43"] != 1 {
		t.Fatalf("loads %v; want p42 twice, p43 once", loads)
	}
}

// A tag's record that Redis lost (evicted, deleted by hand) may have held
// an invalidation: an entry of that tag born before the prefix's last tag
// invalidation is loaded again, once, which makes the record anew.
func TestInvalidateTags_LostRecord(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cs := fleet(t, srv, 2, nil)
	a, b := cs[0], cs[1]
	admin := srv.Client()
	ctx := context.Background()
	var loads atomic.Int32
	load := tagged(&loads, "p", "t1")
	if v, err := a.FetchEntry(ctx, "p", load); err != nil || string(v) != "p#1" {
		t.Fatalf("FetchEntry = %q, %v", v, err)
	}
	if err := a.InvalidateTags(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, wire.TagName("corral", "t1")).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if v, err := b.FetchEntry(ctx, "p", load); err != nil || string(v) != "p#2" {
			t.Fatalf("with t1's record lost: %q, %v; want p#2, loaded again once", v, err)
		}
	}
	if n := admin.Exists(ctx, wire.TagName("corral", "t1")).Val(); n != 1 {
		t.Fatal("the reload did not make t1's record again")
	}
}

// countKeys counts rdb's keys that match pattern.
func countKeys(t *testing.T, rdb *redis.Client, pattern string) int {
	t.Helper()
	n, err := rdb.Eval(context.Background(), `return #redis.call('KEYS', ARGV[1])`, nil, pattern).Int()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A Clear's sweep deletes its own prefix's entries only: not those of a
// prefix that begins with the same name and ":e" (their entries' names
// begin with "svc:e:e:{", which "svc:e:*" matched).
func TestClear_SweepLeavesOtherPrefixes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	svc := newCache(t, srv.Client(), &corral.Options{Prefix: "svc"})
	var loads atomic.Int32
	keys := keyRange("k", 0, 100)
	for _, prefix := range []string{"svc:e", "svc:e:x", "svc:ex"} {
		c := newCache(t, srv.Client(), &corral.Options{Prefix: prefix})
		for _, k := range keys {
			if _, err := c.Fetch(ctx, k, time.Hour, value("v")); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range keys {
		if _, err := svc.Fetch(ctx, k, time.Hour, value("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "svc's cleared entries were not swept", func() bool {
		return countKeys(t, rdb, "svc:e:{*") == 0
	})
	for _, p := range []string{"svc:e:e:{*", "svc:e:x:e:{*", "svc:ex:e:{*"} {
		if n := countKeys(t, rdb, p); n != len(keys) {
			t.Fatalf("after svc's Clear, %d keys match %s; want the other prefix's %d untouched", n, p, len(keys))
		}
	}
	other := newCache(t, srv.Client(), &corral.Options{Prefix: "svc:e"})
	for _, k := range keys {
		if _, err := other.Fetch(ctx, k, time.Hour, func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := loads.Load(); n != 0 {
		t.Fatalf("prefix svc:e loaded %d keys again after svc's Clear; want none", n)
	}
}

// A sweep cut short (here: another process held the sweep's lease when
// the Clear was made, and its Cache closed) is taken up by a Cache of the
// prefix that starts later, on its first read of the records, waiting for
// a lease that has yet to lapse, without another call; corral purge
// --all's own sweep is tested in cmd/corral.
func TestClear_UnfinishedSweepTakenUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	a := newCache(t, srv.Client(), nil)
	keys := keyRange("k", 0, 500)
	var o batchOrigin
	if _, err := a.FetchMany(ctx, keys, time.Hour, o.load); err != nil {
		t.Fatal(err)
	}
	lease := wire.SweptName("corral") + ":l"
	if err := rdb.Set(ctx, lease, "another", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if n := countKeys(t, rdb, "corral:e:{*"); n != len(keys) {
		t.Fatalf("%d entries left after a Clear whose sweep found the lease held; want all %d", n, len(keys))
	}
	// Its holder is gone, but its lease has yet to lapse when b first
	// reads the records: b, which makes no other call, waits for it.
	if err := rdb.Set(ctx, lease, "another", 500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	b := newCache(t, srv.Client(), nil)
	if _, err := b.Fetch(ctx, "other", time.Hour, value("v")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "the unfinished sweep was not taken up", func() bool {
		return countKeys(t, rdb, "corral:e:{*") <= 1 // "other", loaded after the Clear
	})
	clear, _ := rdb.Get(ctx, wire.ClearName("corral")).Result()
	testkit.Eventually(t, 10*time.Second, "the sweep was not recorded as done", func() bool {
		swept, _ := rdb.Get(ctx, wire.SweptName("corral")).Result()
		return swept != "" && strings.HasPrefix(clear, swept+",")
	})
}

// Once another process's InvalidateTags or Clear has reached this one
// (within Coherence), a call here that starts afterwards does not join a
// flight begun before it: it waits for that load, takes its result as
// invalidated, and loads anew.
func TestInvalidateTags_OtherProcessFlightNotJoined(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"tags", "clear"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cs := fleet(t, srv, 2, nil)
			a, b := cs[0], cs[1]
			ctx := context.Background()
			var probes, after atomic.Int32
			if _, err := a.FetchEntry(ctx, "probe", tagged(&probes, "probe", "t")); err != nil {
				t.Fatal(err)
			}
			release, first := blockedLoad(a, "k", "t")
			invalidate := func() error { return b.InvalidateTags(ctx, "t") }
			if kind == "clear" {
				invalidate = func() error { return b.Clear(ctx) }
			}
			if err := invalidate(); err != nil {
				t.Fatal(err)
			}
			// a hears of it once a call of its begins Coherence after it
			// (the call reads the records, which are then stale): a hit on
			// an entry loaded since, which neither the invalidation nor
			// the Clear's sweep touches. (A reload of "probe" would not
			// tell: the sweep may delete it before a has heard.)
			invalidated := time.Now()
			if _, err := a.Fetch(ctx, "fresh", time.Hour, value("v")); err != nil { // loaded: the hits below judge it
				t.Fatal(err)
			}
			for deadline := invalidated.Add(10 * time.Second); ; {
				began := time.Now()
				if _, err := a.Fetch(ctx, "fresh", time.Hour, value("v")); err != nil {
					t.Fatal(err)
				}
				if began.Sub(invalidated) > corral.Coherence {
					break
				}
				if began.After(deadline) {
					t.Fatal("no call began Coherence after the invalidation")
				}
			}
			parked := make(chan struct{})
			var once sync.Once
			corral.SetOnParked(a, func(string) { once.Do(func() { close(parked) }) })
			second := make(chan string, 1)
			go func() {
				v, err := a.FetchEntry(ctx, "k", tagged(&after, "after", "t"))
				second <- fmt.Sprintf("%s %v", v, err)
			}()
			select {
			case <-parked: // its own flight, waiting on the lease of the load begun before
			case got := <-second:
				t.Fatalf("a call begun after the invalidation reached this process returned %s before the load it should wait for ended; stats %+v", got, a.Stats())
			case <-time.After(10 * time.Second):
				t.Fatal("a call begun after the invalidation reached this process joined the flight begun before it")
			}
			close(release)
			if got := <-first; got != "before <nil>" {
				t.Fatalf("the load's own caller = %s; want before", got)
			}
			if got := <-second; got != "after#1 <nil>" {
				t.Fatalf("a call begun after the invalidation reached this process = %s; want after#1, loaded anew", got)
			}
		})
	}
}

// A waiter whose callers all began while its records were fresh takes the
// holder's value from the notice without reading the records again, however
// long the load ran: Coherence asks no more of calls that began then. A
// caller that joins the wait once those records are stale has them read
// before it gets the value.
func TestNotice_RecordsAsOfTheLastCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	records := wire.ClearName("corral")
	var reads atomic.Int32
	f := &faults{}
	f.setBefore(func(cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 3 && strings.EqualFold(fmt.Sprint(a[0]), "evalsha") && a[3] == records {
			reads.Add(1)
		}
		return nil
	})
	rdb := e.srv.Client()
	rdb.AddHook(f)
	waiter := newCache(t, rdb, nil)
	parked := make(chan string, 16) // the waiter will hear the notice (not re-check on its own)
	corral.SetOnParked(waiter, func(ch string) {
		select {
		case parked <- ch:
		default:
		}
	})
	for round, late := range []bool{false, true} {
		// The premise, that the records the wait began with were fresh, holds
		// if the peek that read them was answered within Coherence (it
		// counts from the read's sending). A loaded machine (make test's
		// parallel -race packages) once took longer: a round without a late
		// caller that read them is tried again on a new key, twice at most.
		for try := 0; ; try++ {
			n, retry := noticeRound(t, e, waiter, parked, &reads, fmt.Sprint("k", round, "-", try), late)
			if !retry || try == 2 {
				if want := int32(btoi(late)); n != want {
					t.Fatalf("round %d (a caller joined late: %v): %d reads of the records after the notice; want %d", round, late, n, want)
				}
				break
			}
			t.Logf("round %d, try %d: %d reads of the records after the notice; trying again", round, try, n)
		}
	}
}

// noticeRound is a round of TestNotice_RecordsAsOfTheLastCaller on key:
// the records read after the notice, and whether to try again (a round
// without a late caller that read them).
func noticeRound(t *testing.T, e *env, waiter *corral.Cache, parked chan string, reads *atomic.Int32, key string, late bool) (int32, bool) {
	finish := hold(t, e.c, key, []byte("v"), nil)
	before := waiter.Stats()
	got := make(chan string, 2)
	fetch := func() {
		v, err := waiter.Fetch(context.Background(), key, time.Minute, value("mine"))
		got <- fmt.Sprintf("%s %v", v, err)
	}
	go fetch()
	for ch := range parked {
		if strings.HasSuffix(ch, key) {
			break
		}
	}
	eventually(t, 10*time.Second, "the waiter waits", func() bool { return waiter.Stats().Waits-before.Waits == 1 })
	reads.Store(0)
	time.Sleep(corral.Coherence + 50*time.Millisecond) // the records the wait began with grow stale (not synchronisation)
	if late {
		go fetch() // joins the wait now
		eventually(t, 10*time.Second, "the late caller joins", func() bool { return waiter.Stats().Joined-before.Joined == 1 })
	}
	finish()
	for range 1 + btoi(late) {
		if r := <-got; r != "v <nil>" {
			t.Fatalf("%s: Fetch = %s; want the holder's value", key, r)
		}
	}
	return reads.Load(), !late && reads.Load() != 0
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Once a waiter's notice is judged (by the records as they stood when its
// last caller joined), its flight is joined by nobody: a call that comes
// while it is still answering (held here by an Observer that blocks on
// EventWaitEnd) starts a flight of its own, judged by its own time.
func TestNotice_NoJoinAfterItsJudgement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	finish := hold(t, e.c, "k", []byte("v"), nil)
	ended, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w := newCache(t, e.srv.Client(), &corral.Options{Observer: observerFunc(func(_ context.Context, ev corral.Event) {
		if ev.Kind == corral.EventWaitEnd && ev.Key == "k" {
			once.Do(func() { close(ended); <-proceed })
		}
	})})
	defer func() {
		select {
		case <-proceed:
		default:
			close(proceed)
		}
	}()
	parked := make(chan struct{})
	var pOnce sync.Once
	corral.SetOnParked(w, func(string) { pOnce.Do(func() { close(parked) }) })
	first := make(chan string, 1)
	go func() {
		v, err := w.Fetch(context.Background(), "k", time.Minute, value("mine"))
		first <- fmt.Sprintf("%s %v", v, err)
	}()
	<-parked // waiting for the holder's notice, which it will hear
	finish()
	<-ended // the notice judged; the flight not answered yet
	joined := w.Stats().Joined
	late := make(chan string, 1)
	go func() {
		v, err := w.Fetch(context.Background(), "k", time.Minute, value("mine"))
		late <- fmt.Sprintf("%s %v", v, err)
	}()
	select {
	case got := <-late:
		if got != "v <nil>" || w.Stats().Joined != joined {
			t.Fatalf("late call: %s, joined %d flights; want the value, from a flight of its own", got, w.Stats().Joined-joined)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the late call joined the flight being answered (it waits for it)")
	}
	close(proceed)
	if got := <-first; got != "v <nil>" {
		t.Fatalf("first call: %s", got)
	}
}

// Get after ExpireTags: an entry without a stale window is invalidated (a
// miss), as Fetch finds it; one with a window is served, stale, inside it.
func TestGet_SoftTagInvalidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	for key, stale := range map[string]time.Duration{"no-window": -1, "window": time.Hour} {
		if _, err := e.c.FetchEntry(ctx, key, func(context.Context) (corral.Entry, error) {
			return corral.Entry{Value: []byte("v1"), TTL: time.Hour, StaleTTL: stale, Tags: []string{"t"}}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	other := newCache(t, e.srv.Client(), nil) // the invalidation comes from another process
	if err := other.ExpireTags(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*corral.Cache{e.c, other} {
		eventually(t, 10*time.Second, "Get misses the entry without a window", func() bool {
			_, err := c.Get(ctx, "no-window")
			return errors.Is(err, corral.ErrMiss)
		})
		if v, err := c.Get(ctx, "window"); string(v) != "v1" || err != nil {
			t.Fatalf("Get(window) = %q, %v; want the stale value inside its window", v, err)
		}
	}
}
