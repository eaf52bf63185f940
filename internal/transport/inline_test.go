package transport

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// With a client that bounds its I/O by the context's deadline, reads are
// run in the caller's goroutine: the pipeline's senders send nothing for
// them. With go-redis's default client, they go through the pipeline.
func TestInline_HitsInTheCallersGoroutine(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name   string
		opts   func(*redis.Options)
		inline bool
	}{
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }, true},
		{"default client", func(*redis.Options) {}, false},
		{"ContextTimeoutEnabled, reads never time out", func(o *redis.Options) { o.ContextTimeoutEnabled, o.ReadTimeout = true, -2 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := srv.Client(tc.opts)
			var log bytes.Buffer
			p := newPipeline(t, rdb, Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
			// A client whose hits cannot go inline is warned of, once.
			if warned := strings.Count(log.String(), "does not bound its reads by the context"); warned != map[bool]int{true: 0, false: 1}[tc.inline] {
				t.Fatalf("New logged %q; want the slow client's warning once exactly when reads cannot go inline", log.String())
			}
			ctx := context.Background()
			prefix := "inline" + strconv.Itoa(len(tc.name)) + ":"
			for i := range 10 { // writes: through the pipeline
				k := prefix + strconv.Itoa(i)
				set := &Op{Ctx: ctx, Key: k, Build: func(ctx context.Context, pp redis.Pipeliner) redis.Cmder { return pp.Set(ctx, k, "v", 0) }}
				if err := resultErr(p.Do(set)); err != nil {
					t.Fatal(err)
				}
			}
			// A read slower than its bound, or a probe still unanswered,
			// sends the reads of the next second through the pipeline (the
			// rules of inline.go): on a machine starved of CPU that can
			// happen to any round of reads. So the inline client gets up to
			// 10 rounds, and passes on the first that sent no batch; the
			// others must send batches in every round.
			rounds := 1
			if tc.inline {
				rounds = 10
			}
			var sent []int64
			for range rounds {
				before := p.Batches()
				for i := range 300 { // clock reads (the first syncs the server's clock)
					o := get(ctx, prefix+strconv.Itoa(i%10))
					o.Clock = true
					if v, err := value(sendWait(p, o)); err != nil || v != "v" {
						t.Fatalf("read %d = %q, %v", i, v, err)
					}
				}
				sent = append(sent, p.Batches()-before)
				if (sent[len(sent)-1] == 0) == tc.inline {
					break
				}
			}
			if last := sent[len(sent)-1]; (last == 0) != tc.inline {
				t.Fatalf("the pipeline sent %v batches in rounds of 300 reads; inline reads expected: %v", sent, tc.inline)
			}
		})
	}
}

// The server's clock as estimated from the latest sync is never earlier
// than the server's own: TIME, once its reply is in, is a time the server
// had already reached, so an estimate made after it is no earlier. It is
// later by about a round trip at most; a sync older than clockFresh is not
// used.
func TestInline_ServerClockEstimate(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	var l liveness
	if _, ok := l.serverNow(time.Now()); ok {
		t.Fatal("a clock never synced is reported synced")
	}
	var worst time.Duration
	for i := range 200 {
		if i%20 == 0 { // sync as a batch does: TIME, paired with when it was sent
			sent := time.Now()
			tm, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			l.synced(tm, sent)
		}
		tm, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		est, ok := l.serverNow(time.Now()) // after TIME's reply came
		if !ok {
			t.Fatal("a sync less than clockFresh old is reported stale")
		}
		if est < tm.UnixMilli() {
			t.Fatalf("estimate %d ms is earlier than the server's clock %d ms, read before it", est, tm.UnixMilli())
		}
		worst = max(worst, time.Duration(est-tm.UnixMilli())*time.Millisecond)
	}
	if worst > time.Second {
		t.Fatalf("estimate up to %v ahead of the server's clock", worst)
	}
	t.Logf("estimate at most %v ahead of the server's clock (a round trip, rounded up)", worst)
	l.synced(time.Now(), time.Now().Add(-clockFresh-time.Millisecond))
	if _, ok := l.serverNow(time.Now()); ok {
		t.Fatal("a sync older than clockFresh is reported fresh")
	}
}

// On a Cluster, an inline read goes to the key's master, and the clock it is
// decided on is that master's.
func TestInline_Cluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	p := newPipeline(t, cl.Client(func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true }), Config{})
	ctx := context.Background()
	keys := make([]string, 30) // over the three masters
	for i := range keys {
		k := "k" + strconv.Itoa(i)
		keys[i] = k
		set := &Op{Ctx: ctx, Key: k, Clock: true, Build: func(ctx context.Context, pp redis.Pipeliner) redis.Cmder { return pp.Set(ctx, k, k, 0) }}
		if err := resultErr(p.Do(set)); err != nil {
			t.Fatal(err)
		}
	}
	// As in TestInline_HitsInTheCallersGoroutine, a slow read or a probe
	// still out sends reads through the pipeline for a while, by design: on
	// a starved machine, up to 10 rounds of 150 reads, one of which must be
	// read inline throughout.
	var sent []int64
	for range 10 {
		before := p.Batches()
		for range 5 {
			for _, k := range keys {
				o := get(ctx, k)
				o.Clock = true
				if v, err := value(sendWait(p, o)); err != nil || v != k {
					t.Fatalf("read %s = %q, %v", k, v, err)
				}
			}
		}
		if sent = append(sent, p.Batches()-before); sent[len(sent)-1] == 0 {
			break
		}
	}
	if last := sent[len(sent)-1]; last != 0 {
		t.Fatalf("the pipeline sent %v batches in rounds of 150 reads; want every read of a round read inline", sent)
	}
	synced := 0
	p.nodes.Range(func(addr, l any) bool {
		if _, ok := l.(*liveness).serverNow(time.Now()); ok && addr != "" {
			synced++
		}
		return true
	})
	if synced != 3 {
		t.Fatalf("%d masters' clocks synced; want 3", synced)
	}
}

// An inline read runs in its caller's goroutine, so it ends by the caller's
// deadline (Op.ReadBy), whatever its own bound: a caller with a short
// deadline is not held by a stalled Redis.
func TestInline_EndsByTheCallersDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := srv.Client()
	p := newPipeline(t, srv.Client(func(o *redis.Options) { o.ContextTimeoutEnabled = true }), Config{})
	ctx := context.Background()
	// Only the caller's deadline can end a read: not a set-up read slowed
	// on a loaded machine either.
	p.inliner.bound = time.Minute
	for range 2 { // through the pipeline, then inline: the node's clock is synced
		o := get(ctx, "k")
		o.Clock = true
		if _, err := value(sendWait(p, o)); !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	if p.inliner.restTo.Load() != 0 {
		// A set-up read failed inline (it happened on a loaded machine,
		// in a fresh-clone make test): not what this test is about.
		t.Log("a set-up read failed inline; inline reads rested: reset")
		p.inliner.restTo.Store(0)
	}
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	// As the Cache's peek: the op is the Cache's (its context is not the
	// caller's, others may share it), the caller waits until its deadline.
	o := get(ctx, "k")
	o.Clock = true
	o.ReadBy, _ = cctx.Deadline()
	done := make(chan Result, 1)
	o.Finish = func(r Result) { done <- r }
	p.Send(o)
	var err error
	select {
	case r := <-done:
		_, err = value(r)
	case <-cctx.Done():
		err = cctx.Err()
	}
	if took := time.Since(t0); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Fatalf("a read with a 50ms deadline while Redis is paused for 1.5s = %v after %v; want the deadline's error soon after 50ms", err, took)
	}
	if p.inliner.restTo.Load() != 0 {
		t.Fatal("inline reads rest after a read cut short by its caller's deadline")
	}
}
