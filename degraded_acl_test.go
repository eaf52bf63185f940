package corral_test

// D2: Redis ACL users without some of the rights corral uses.

import (
	"context"
	"errors"
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

// aclClient creates the ACL user name with rules on srv (Redis 7 denies
// every channel to a new user unless a rule grants it) and returns a
// client that logs in as that user.
func aclClient(t *testing.T, srv *redistest.Server, name string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", "nopass"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	return srv.Client(func(o *redis.Options) { o.Username, o.Password = name, "any" })
}

// evalshaCalls returns how many EVALSHA calls srv has served.
func evalshaCalls(t *testing.T, admin *redis.Client) int64 {
	t.Helper()
	info := admin.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// D2, a user with every command and key but no channel: Set and Delete
// report the write (it stood; the notice that failed is counted and logged),
// and waiters in other processes, which can hear no notice, re-check on
// their own: each answered soon after the commit, with Redis traffic that
// grows with processes and keys, not with callers.
func TestDegraded_D2_NoChannelRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	var logged testkit.Buffer
	rules := []string{"~*", "resetchannels", "+@all"}
	holder := newCache(t, aclClient(t, srv, "nochan", rules...), &corral.Options{Logger: slogTo(&logged)})

	if err := holder.Set(ctx, "k", []byte("v"), time.Minute); err != nil {
		t.Fatalf("Set = %v; want nil (the entry is stored, only its notice failed)", err)
	}
	if v, err := holder.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("Get after Set = %q, %v", v, err)
	}
	if err := holder.Delete(ctx, "k"); err != nil {
		t.Fatalf("Delete = %v; want nil (the entry is gone, only its notice failed)", err)
	}
	if n := admin.Exists(ctx, wire.EntryName("corral", "k")).Val(); n != 0 {
		t.Fatalf("the entry is still there after Delete")
	}
	if st := holder.Stats(); st.NoticesFailed < 2 || st.RedisErrors != 0 {
		t.Fatalf("stats %+v; want the failed notices counted, and no Redis error", st)
	}
	eventually(t, 5*time.Second, "the missing channel rights logged", func() bool {
		return strings.Contains(logged.String(), "may not publish on corral's channels")
	})

	// Waiters in 3 other processes, 30 goroutines each, on 10 keys the
	// holder loads for a second.
	const processes, keys, callers = 3, 10, 30
	finishes := make([]func(), keys)
	for k := range keys {
		finishes[k] = hold(t, holder, "w"+strconv.Itoa(k), []byte("loaded"), nil)
	}
	waiters := make([]*corral.Cache, processes)
	for i := range waiters {
		waiters[i] = newCache(t, aclClient(t, srv, "nochan", rules...), nil)
	}
	before := evalshaCalls(t, admin)
	var finished atomic.Int64 // when the loads were let go, Unix ns
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for _, w := range waiters {
		for k := range keys {
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := w.Fetch(ctx, "w"+strconv.Itoa(k), time.Minute, value("not me"))
					if err != nil || string(v) != "loaded" {
						t.Errorf("waiter got %q, %v; want the holder's value", v, err)
					}
					after := time.Now().UnixNano() - finished.Load()
					for s := slowest.Load(); after > s && !slowest.CompareAndSwap(s, after); s = slowest.Load() {
					}
				}()
			}
		}
	}
	eventually(t, 5*time.Second, "every process waiting on every key", func() bool {
		for _, w := range waiters {
			if w.Stats().Waits < keys {
				return false
			}
		}
		return true
	})
	<-time.After(time.Second) // the load's duration, not synchronisation
	finished.Store(time.Now().UnixNano())
	for _, f := range finishes {
		f()
	}
	wg.Wait()
	fetches := evalshaCalls(t, admin) - before
	t.Logf("slowest waiter answered %v after the loads ended; %d script calls for %d waiters",
		time.Duration(slowest.Load()).Round(time.Millisecond), fetches, processes*keys*callers)
	if d := time.Duration(slowest.Load()); d > prompt {
		t.Fatalf("the slowest waiter answered %v after the loads ended; want within 250 ms (bound %v)", d, prompt)
	}
	// About 1.25 s of waiting at most 4 re-checks a second per process and
	// key, plus the first fetches and the commits: well under one per caller
	// per 100 ms.
	if limit := int64(processes * keys * 12); fetches > limit {
		t.Fatalf("%d script calls while waiting; want O(processes x keys) (<= %d)", fetches, limit)
	}
}

// D2, users without a key or command right: every call that needs the right
// returns ErrPermission with Redis's NOPERM text naming it; Fetch never
// calls the loader for it (that would load on every call) and the breaker
// stays closed; the first-use check logs each missing right once.
func TestDegraded_D2_MissingRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		rules []string
		right string // in the error and the log
		check string // what the first-use check logs
	}{
		{"no key rights", []string{"~other:*", "&*", "+@all"}, "keys", "keys"},
		{"no EVALSHA", []string{"~*", "&*", "+@all", "-evalsha", "-eval"}, "evalsha", "'eval' command"},
		{"no SET in scripts", []string{"~*", "&*", "+@all", "-set"}, "can't run this command", "(SET)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged testkit.Buffer
			c := newCache(t, aclClient(t, srv, strings.ReplaceAll(tc.name, " ", "-"), tc.rules...), &corral.Options{Logger: slogTo(&logged)})
			var loads atomic.Int32
			load := func(context.Context) ([]byte, error) { loads.Add(1); return []byte("v"), nil }
			for i := range 5 {
				_, err := c.Fetch(ctx, "k"+strconv.Itoa(i), time.Minute, load)
				if !errors.Is(err, corral.ErrPermission) || !strings.Contains(err.Error(), tc.right) {
					t.Fatalf("Fetch = %v; want ErrPermission naming %q", err, tc.right)
				}
			}
			if n := loads.Load(); n != 0 {
				t.Fatalf("%d loads; want none (each would load again on every call)", n)
			}
			if tc.right != "can't run this command" { // Get, Set and Delete need no SET
				if err := c.Set(ctx, "k", []byte("v"), time.Minute); !errors.Is(err, corral.ErrPermission) {
					t.Fatalf("Set = %v; want ErrPermission", err)
				}
				if _, err := c.Get(ctx, "k"); !errors.Is(err, corral.ErrPermission) {
					t.Fatalf("Get = %v; want ErrPermission", err)
				}
				if err := c.Delete(ctx, "k"); !errors.Is(err, corral.ErrPermission) {
					t.Fatalf("Delete = %v; want ErrPermission", err)
				}
			}
			if st := c.Stats(); st.BreakerOpens != 0 || st.FailOpens != 0 || st.RedisErrors != 0 {
				t.Fatalf("stats %+v; want no breaker, fail-open or Redis error: Redis answered", st)
			}
			eventually(t, 5*time.Second, "the first-use check run", func() bool {
				return strings.Contains(logged.String(), tc.check)
			})
			if n := strings.Count(logged.String(), tc.right); n != 1 {
				t.Fatalf("%q logged %d times; want once:\n%s", tc.right, n, logged.String())
			}
		})
	}
}

// D2, a fleet whose users differ: one may use sharded pub/sub, the other
// only plain (SPUBLISH and SSUBSCRIBE denied). Each announces how it
// publishes in its lease token, and a waiter that cannot hear the holder
// re-checks on its own: either way round, waiters are answered soon after
// the load. A user whose rights cover only Prefix's keys and channels gets
// sharded pub/sub: the probe is under Prefix too.
func TestDegraded_D2_MixedFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	sharded := newCache(t, aclClient(t, srv, "sharded", "~app:*", "&app:*", "+@all"), &corral.Options{Prefix: "app"})
	plain := newCache(t, aclClient(t, srv, "plain", "~app:*", "&app:*", "+@all", "-spublish", "-ssubscribe"), &corral.Options{Prefix: "app"})
	// First use teaches each its pub/sub mode.
	for _, c := range []*corral.Cache{sharded, plain} {
		if err := c.Set(ctx, "warm", []byte("x"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for i, tc := range []struct {
		name           string
		holder, waiter *corral.Cache
		mark           byte
	}{
		{"sharded holder, plain waiter", sharded, plain, wire.AnnounceSharded},
		{"plain holder, sharded waiter", plain, sharded, wire.AnnouncePlain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "m" + strconv.Itoa(i)
			finish := hold(t, tc.holder, key, []byte("loaded"), nil)
			if lease := admin.Get(ctx, wire.NewNames("app", key).Lease).Val(); wire.Announces(lease) != tc.mark {
				t.Fatalf("lease token %q; want it to announce %q", lease, tc.mark)
			}
			waits := tc.waiter.Stats().Waits
			got := make(chan time.Time, 1)
			go func() {
				v, err := tc.waiter.Fetch(ctx, key, time.Minute, value("not me"))
				if err != nil || string(v) != "loaded" {
					t.Errorf("waiter got %q, %v", v, err)
				}
				got <- time.Now()
			}()
			eventually(t, 5*time.Second, "the waiter waiting", func() bool { return tc.waiter.Stats().Waits > waits })
			finished := time.Now()
			finish()
			d := (<-got).Sub(finished)
			t.Logf("answered %v after the load ended", d.Round(time.Millisecond))
			if d > prompt {
				t.Fatalf("waiter answered %v after the load; want within 250 ms (bound %v)", d, prompt)
			}
		})
	}
}

// D2 and the near cache: a user without the right to subscribe to
// __redis__:invalidate cannot keep near copies coherent, so none are served
// (a warning says why, once); every call is answered from Redis.
func TestDegraded_D2_NearCacheWithoutInvalidations(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logged testkit.Buffer
	c := newCache(t, aclClient(t, srv, "noinval", "~*", "&corral:*", "+@all"),
		&corral.Options{NearCache: corral.NearCacheOptions{Size: 100}, Logger: slogTo(&logged)})
	ctx := context.Background()
	eventually(t, 5*time.Second, "the invalidation stream's failure logged", func() bool {
		return strings.Contains(logged.String(), "invalidation stream failed")
	})
	for range 5 {
		if v, err := c.Fetch(ctx, "k", time.Minute, value("v")); err != nil || string(v) != "v" {
			t.Fatalf("Fetch = %q, %v", v, err)
		}
	}
	if st := c.Stats(); st.NearHits != 0 || st.Hits != 4 {
		t.Fatalf("stats %+v; want 4 hits from Redis, none from the near cache", st)
	}
	if !strings.Contains(logged.String(), "NOPERM") || strings.Count(logged.String(), "invalidation stream failed") != 1 {
		t.Fatalf("want one warning naming the NOPERM error:\n%s", logged.String())
	}
}

// readmeACL is the ACL rule the README gives for a corral user with the
// default Prefix (keep them the same).
var readmeACL = strings.Fields(`resetchannels ~corral:* &corral:* &__redis__:invalidate
	+@connection +evalsha +eval +time +get +mget +set +del +pttl +pexpire +exists +scan
	+hset +hget +hmget +hstrlen +hdel +publish +spublish +subscribe +ssubscribe
	+unsubscribe +sunsubscribe +info +config|get +client|tracking +client|id`)

// The README's ACL rule is enough: a stampede over two processes (one load,
// a waiter woken by its notice), Set, Delete and near hits, with nothing
// logged about rights.
func TestDegraded_D2_ReadmeACLRule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logged testkit.Buffer
	opts := func() *corral.Options {
		return &corral.Options{NearCache: corral.NearCacheOptions{Size: 100}, Logger: slogTo(&logged)}
	}
	holder := newCache(t, aclClient(t, srv, "corral", readmeACL...), opts())
	waiter := newCache(t, aclClient(t, srv, "corral", readmeACL...), opts())
	ctx := context.Background()
	if err := holder.Set(ctx, "warm", []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	finish := hold(t, holder, "k", []byte("loaded"), nil)
	got := make(chan error, 1)
	go func() {
		v, err := waiter.Fetch(ctx, "k", time.Minute, value("not me"))
		if err == nil && string(v) != "loaded" {
			err = errors.New("got " + string(v))
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the waiter waiting", func() bool { return waiter.Stats().Waits == 1 })
	finish()
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	eventually(t, 5*time.Second, "a near hit", func() bool {
		v, err := waiter.Fetch(ctx, "k", time.Minute, value("not me"))
		return err == nil && string(v) == "loaded" && waiter.Stats().NearHits > 0
	})
	if err := waiter.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	// Group invalidation: tagged entries, their records, the sweep.
	if err := holder.SetEntry(ctx, "t", corral.Entry{Value: []byte("x"), TTL: time.Minute, Tags: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	if err := waiter.InvalidateTags(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Get(ctx, "t"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("Get of an invalidated entry = %v; want ErrMiss", err)
	}
	if err := holder.Expire(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if err := holder.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the sweep", func() bool {
		_, err := srv.Client().Get(ctx, "corral:e:{"+wire.SlotTag("warm")+"}:warm").Result()
		return err != nil
	})
	// A FetchEntry stores its entry with its TTL under the rule: commit.lua
	// sets every expiry with PEXPIRE (a commit capped by the loader's TTL
	// used PEXPIREAT, which the rule does not grant).
	if v, err := holder.FetchEntry(ctx, "entry", func(context.Context) (corral.Entry, error) {
		return corral.Entry{Value: []byte("e"), TTL: time.Minute}, nil
	}); err != nil || string(v) != "e" {
		t.Fatalf("FetchEntry = %q, %v", v, err)
	}
	if ttl, err := srv.Client().PTTL(ctx, "corral:e:{"+wire.SlotTag("entry")+"}:entry").Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the entry FetchEntry stored has PTTL %v, %v; want at most its TTL, a minute", ttl, err)
	}
	for _, c := range []*corral.Cache{holder, waiter} {
		if st := c.Stats(); st.NoticesFailed != 0 || st.RedisErrors != 0 || st.FailOpens != 0 {
			t.Fatalf("stats %+v; want no failed notice, Redis error or fail-open", st)
		}
	}
	if s := logged.String(); strings.Contains(s, "NOPERM") || strings.Contains(s, "denies") || strings.Contains(s, "may not") {
		t.Fatalf("rights logged as missing:\n%s", s)
	}
}

// D1's kind, a replica: corral pointed at a read-only replica serves what
// it holds (replicated entries), loads misses directly, once per key in the
// process, and says READONLY: in Set's error and in the warning. The
// breaker stays closed.
func TestDegraded_D1_ReadOnlyReplica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	ctx := context.Background()
	writer := newCache(t, master.Client(), nil)
	if err := writer.Set(ctx, "cached", []byte("from the master"), time.Hour); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the entry replicated", func() bool {
		return replica.Client().Exists(ctx, wire.EntryName("corral", "cached")).Val() == 1
	})
	var logged testkit.Buffer
	c := newCache(t, replica.Client(), &corral.Options{Logger: slogTo(&logged)})
	var loads atomic.Int32
	load := func(context.Context) ([]byte, error) {
		loads.Add(1)
		<-time.After(20 * time.Millisecond) // concurrent callers meet in one load
		return []byte("loaded"), nil
	}
	if v, err := c.Fetch(ctx, "cached", time.Hour, load); err != nil || string(v) != "from the master" || loads.Load() != 0 {
		t.Fatalf("Fetch of a replicated entry = %q, %v after %d loads; want a hit", v, err, loads.Load())
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Fetch(ctx, "missing", time.Hour, load); err != nil || string(v) != "loaded" {
				t.Errorf("Fetch of a miss = %q, %v; want the loader's value", v, err)
			}
		}()
	}
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads of a miss by 10 concurrent callers; want 1", n)
	}
	if err := c.Set(ctx, "k", []byte("v"), time.Minute); !errors.Is(err, corral.ErrWriteRefused) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Set on a replica = %v; want ErrWriteRefused naming READONLY", err)
	}
	if err := c.Delete(ctx, "cached"); !errors.Is(err, corral.ErrWriteRefused) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Delete on a replica = %v; want ErrWriteRefused naming READONLY", err)
	}
	if st := c.Stats(); st.BreakerOpens != 0 || st.WritesRefused == 0 || st.RedisErrors != 0 {
		t.Fatalf("stats %+v; want refused writes counted, no breaker, no Redis error", st)
	}
	if !strings.Contains(logged.String(), "READONLY") {
		t.Fatalf("the warning does not name READONLY:\n%s", logged.String())
	}
}
