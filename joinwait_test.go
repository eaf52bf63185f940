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
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	c := newCache(t, redis.NewClient(&redis.Options{Addr: proxy.Addr}), &corral.Options{Beta: 1e38})
	ctx := context.Background()
	slow := func(context.Context) ([]byte, error) {
		time.Sleep(5 * time.Millisecond) // the load's duration, which XFetch weighs
		return []byte("huge-beta-value"), nil
	}
	if _, err := newCache(t, srv.Client(), nil).Fetch(ctx, "k", time.Hour, slow); err != nil {
		t.Fatal(err)
	}
	held, release := proxy.HoldReply([]byte("huge-beta-value"))
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
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		release()
		t.Fatal("the peek's reply was not held back")
	}
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
