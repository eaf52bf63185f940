package corral_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Callers that joined a peek which found the entry fresh each make their
// own XFetch draw (joinwait.go keeps it, as a float32, for the path it
// declines to). With a Beta so large that nearly every draw picks the
// entry for early refresh, and some exceed a float32's range, the shallow
// answer declines for those and the old path answers them with the same
// draw: every caller is answered, and counted once, never an error.
func TestJoinedPeek_HugeBetaDrawsAnswer(t *testing.T) {
	slow := func(context.Context) ([]byte, error) {
		time.Sleep(5 * time.Millisecond) // the load's duration, which XFetch weighs
		return []byte("huge-beta-value"), nil
	}
	c, held, release := heldPeek(t, &corral.Options{Beta: 1e38}, "k", slow, "huge-beta-value")
	ctx := context.Background()
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, errs[i] = c.Fetch(cctx, "k", time.Hour, slow)
		})
	}
	heldBack(t, held, "peek's reply")
	eventually(t, 5*time.Second, "every caller joined the peek", func() bool { return corral.PeekCallers(c, "k") == n })
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if s := c.Stats(); s.Calls() != n {
		t.Fatalf("%d calls counted, want %d", s.Calls(), n)
	}
}

// heldPeek returns a Cache (opts) behind a proxy, with key stored by
// another Cache, straight on the server, with the value load returns: the
// proxy holds back the next reply that carries pattern (the Cache's peek
// of key, once callers ask) until release is called. held is closed once
// it did.
func heldPeek(t *testing.T, opts *corral.Options, key string, load func(context.Context) ([]byte, error), pattern string) (c *corral.Cache, held <-chan struct{}, release func()) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c = newCache(t, redis.NewClient(&redis.Options{Addr: proxy.Addr}), opts)
	if _, err := newCache(t, srv.Client(), nil).Fetch(context.Background(), key, time.Hour, load); err != nil {
		t.Fatal(err)
	}
	held, release = proxy.HoldReply([]byte(pattern))
	return c, held, release
}
