package corral

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/scripts"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// TestEarlyRefreshRate checks XFetch (Vattani, Chierichetti, Lowenstein,
// VLDB 2015) as corral runs it, client draw plus fetch.lua: a fresh entry
// whose last load took d, with r left before its soft expiry, is refreshed
// early with probability exp(-r/(d*Beta)). A chi-square goodness-of-fit over
// 2,400 draws, with a seeded random source so the test is repeatable.
func TestEarlyRefreshRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	const d = 1000 // ms: large next to the clock's drift within one trial
	bins := []struct {
		beta float64
		r    int64 // ms left before the soft expiry
	}{{1, 100}, {1, 500}, {1, 1000}, {1, 2000}, {2, 1000}, {2, 3000}}
	const trials = 400

	var mu sync.Mutex
	src := rand.New(rand.NewPCG(2015, 42))
	chi2 := 0.0
	for _, b := range bins {
		o, err := (&Options{Beta: b.beta, Rand: func() float64 {
			mu.Lock()
			defer mu.Unlock()
			return src.Float64()
		}}).withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		c := &Cache{opts: o}
		n := wire.NewNames("corral", "xfetch")
		refreshed := 0
		for range trials {
			// The entry, written r before its soft expiry by the server's
			// clock, and fetch.lua, in one transaction: no stall of a busy
			// machine can come between them.
			var fetch *redis.Cmd
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, n.Lease)
				expiresIn.Eval(ctx, p, []string{n.Entry}, b.r, d)
				fetch = scripts.Fetch.Eval(ctx, p, []string{n.Entry, n.Lease}, "tok", time.Minute.Milliseconds(),
					strconv.FormatFloat(c.earlyFactor(), 'g', -1, 64), wire.LargeReply, "", "")
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			r, err := wire.ParseFetch(fetch.Val())
			if err != nil || r.Kind != wire.Hit {
				t.Fatalf("fetch = %+v, %v", r, err)
			}
			if r.Refresh {
				refreshed++
			}
		}
		p := math.Exp(-float64(b.r) / (d * b.beta))
		expect := trials * p
		chi2 += (float64(refreshed) - expect) * (float64(refreshed) - expect) / (expect * (1 - p))
		t.Logf("Beta %v, r/d %.1f: %d/%d early refreshes, expected %.1f", b.beta, float64(b.r)/d, refreshed, trials, expect)
	}
	// 6 bins, 6 degrees of freedom: the 0.1% critical value is 22.46.
	if chi2 > 22.46 {
		t.Fatalf("chi-square %.1f over %d bins: early refresh does not follow exp(-r/(d*Beta))", chi2, len(bins))
	}
	t.Logf("chi-square %.2f (6 d.f.)", chi2)
}

// expiresIn writes an entry whose soft expiry is ARGV[1] ms from the
// server's now, and whose last load took ARGV[2] ms.
var expiresIn = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'v', 'x', 's', now + tonumber(ARGV[1]), 'd', ARGV[2], 'f', '')
return 1
`)

// With DisableEarlyRefresh, or a stale window, a fresh entry is never
// refreshed early, however close its expiry.
func TestEarlyRefreshDisabled(t *testing.T) {
	t.Parallel()
	for _, opts := range []Options{{DisableEarlyRefresh: true}, {StaleTTL: time.Second}} {
		o, _ := opts.withDefaults()
		c := &Cache{opts: o}
		for range 1000 {
			if x := c.earlyFactor(); x != 0 {
				t.Fatalf("earlyFactor = %v with %+v", x, opts)
			}
		}
	}
}
