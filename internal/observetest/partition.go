package observetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/redis/go-redis/v9"
)

// The parts of the script that check that the outcomes of calls partition
// them: each call the script makes is counted (calls), and Run checks that
// the outcomes the Stats count add up to them.

// calls counts the calls the script makes of the Caches of each prefix:
// each Fetch, and each distinct key of a FetchMany.
type calls map[string]*atomic.Uint64

// cache is a Cache of the script, counting the calls made of it.
type cache struct {
	*corral.Cache
	prefix string
	made   *atomic.Uint64 // calls made of the Caches of prefix
}

func newCache(t *testing.T, rdb redis.UniversalClient, o *corral.Options, made calls) cache {
	t.Helper()
	c, err := corral.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if made[o.Prefix] == nil {
		made[o.Prefix] = new(atomic.Uint64)
	}
	return cache{Cache: c, prefix: o.Prefix, made: made[o.Prefix]}
}

// Fetch is corral.Cache.Fetch, counted.
func (c cache) Fetch(ctx context.Context, key string, ttl time.Duration, load func(context.Context) ([]byte, error)) ([]byte, error) {
	c.made.Add(1)
	return c.Cache.Fetch(ctx, key, ttl, load)
}

// FetchMany is corral.Cache.FetchMany, each distinct key counted.
func (c cache) FetchMany(ctx context.Context, keys []string, ttl time.Duration,
	load func(context.Context, []string) (map[string][]byte, error)) (map[string][]byte, error) {
	distinct := map[string]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	c.made.Add(uint64(len(distinct)))
	return c.Cache.FetchMany(ctx, keys, ttl, load)
}

// stampede has n calls on each of c and other ask for a cold key at once,
// c's first call's load held until every call is under way: the fleet
// loads it once, one miss (c's first call), c's other calls joined its
// flight (coalesced), and other's joined one flight that waited for c's
// load (waited).
func stampede(t *testing.T, c, other cache, n int) {
	joined := c.Stats().Joined
	release, done := hold(t, c, "w", "v")
	errs := make(chan error, 2*n-1)
	ask := func(c cache) {
		v, err := c.Fetch(context.Background(), "w", time.Hour, value("x"))
		if err == nil && string(v) != "v" {
			err = errors.New("a call of the stampede got " + strconv.Quote(string(v)))
		}
		errs <- err
	}
	for range n - 1 {
		go ask(c)
	}
	for range n {
		go ask(other)
	}
	poll(t, "the stampede under way", func() bool {
		st := other.Stats()
		return c.Stats().Joined == joined+uint64(n-1) && st.Waits == 1 && st.Joined == uint64(n-1)
	})
	release()
	all := []error{<-done}
	for range 2*n - 1 {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
}

// ownErrors makes calls of c that end in errors of their own: one whose
// context's deadline passes while it waits for another call's load (the
// load goes on, a miss for the call that started it), one whose context
// ended before it began, and one of an empty key.
func ownErrors(t *testing.T, c cache) {
	joined := c.Stats().Joined
	release, done := hold(t, c, "dl", "v")
	ctx, expire := deadline()
	waited := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, "dl", time.Hour, value("x"))
		waited <- err
	}()
	poll(t, "the call joining the load", func() bool { return c.Stats().Joined == joined+1 })
	expire()
	if err := <-waited; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch past its deadline = %v; want context.DeadlineExceeded", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Fetch(ended, "dl", time.Hour, value("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Fetch with a context that ended = %v; want context.Canceled", err)
	}
	if _, err := c.Fetch(context.Background(), "", time.Hour, value("x")); !errors.Is(err, corral.ErrInvalidKey) {
		t.Fatalf("Fetch of an empty key = %v; want ErrInvalidKey", err)
	}
}

// deadline returns a context whose deadline passes when expire is called:
// its Err is then context.DeadlineExceeded, as at a real deadline, at a
// moment the script chooses.
func deadline() (ctx context.Context, expire func()) {
	d := &deadlineCtx{Context: context.Background(), done: make(chan struct{})}
	return d, func() { close(d.done) }
}

type deadlineCtx struct {
	context.Context
	done chan struct{}
}

func (d *deadlineCtx) Done() <-chan struct{} { return d.done }

func (d *deadlineCtx) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// fetchMany makes FetchMany calls of c (ManyOutcomes): one of a key held
// (a hit), two missing (misses, one call of loadMany), one repeated (one
// call) and an empty key (an error); and one refused as a whole for its
// TTL (an error for each of its keys).
func fetchMany(t *testing.T, c cache) {
	ctx := context.Background()
	var loads atomic.Int32
	load := func(_ context.Context, keys []string) (map[string][]byte, error) {
		loads.Add(1)
		vals := map[string][]byte{}
		for _, k := range keys {
			vals[k] = []byte("v")
		}
		return vals, nil
	}
	got, err := c.FetchMany(ctx, []string{"k", "fm1", "fm2", "fm1", ""}, time.Hour, load)
	var be *corral.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 1 || !errors.Is(be.Errs[""], corral.ErrInvalidKey) {
		t.Fatalf("FetchMany with an empty key: %v; want a *BatchError of ErrInvalidKey for it alone", err)
	}
	if fmt.Sprint(got) != "map[fm1:[118] fm2:[118] k:[118]]" || loads.Load() != 1 {
		t.Fatalf("FetchMany = %q after %d calls of loadMany; want each key's value, one call", got, loads.Load())
	}
	if _, err := c.FetchMany(ctx, []string{"x", "y"}, 0, load); !errors.Is(err, corral.ErrInvalidTTL) {
		t.Fatalf("FetchMany with a TTL of 0 = %v; want ErrInvalidTTL", err)
	}
}
