package renewal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/watchdog"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lease is the i-th lease of a test, in a slot of its own.
func lease(i int) *watchdog.Lease {
	n := wire.NewNames("corral", fmt.Sprint("k", i))
	return &watchdog.Lease{Key: n.Lease, Entry: n.Entry, Token: fmt.Sprint("tok", i)}
}

// send renews leases through a new pipeline on rdb, as the Watchdog's
// rounds do, with a deadline a minute ahead of the server's clock.
func send(t *testing.T, rdb redis.UniversalClient, leases []*watchdog.Lease, held int64) []watchdog.Reply {
	t.Helper()
	p := transport.New(rdb, transport.Config{Timeout: 5 * time.Second, Rand: func() float64 { return 0.5 },
		Breaker: transport.BreakerConfig{Threshold: 5, Cooldown: time.Second}})
	t.Cleanup(func() { p.Close().Wait() })
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]watchdog.Renewal, len(leases))
	for i, l := range leases {
		rs[i] = watchdog.Renewal{Lease: l, Held: held, Deadline: now.UnixMilli() + time.Minute.Milliseconds()}
	}
	return Send(context.Background(), p, time.Hour, rs)
}

// A round renews many leases, more than one call holds, each as renew.lua
// would alone: its holder's extended, another's lost, a missing one before
// its deadline taken again (evicted), past it lost; and none renewed past
// the round's deadline.
func testRound(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	const n = 2*MaxLeases + 50
	leases := make([]*watchdog.Lease, n)
	want := make([]wire.Renewal, n)
	for i := range leases {
		leases[i] = lease(i)
		switch i % 3 {
		case 0: // held by its token
			rdb.Set(ctx, leases[i].Key, leases[i].Token, time.Second)
			want[i] = wire.Renewed
		case 1: // held by another
			rdb.Set(ctx, leases[i].Key, "other", time.Second)
			want[i] = wire.RenewLost
		case 2: // missing (evicted), its deadline ahead
			want[i] = wire.RenewRetaken
		}
	}
	now, _ := rdb.Time(ctx).Result()
	replies := send(t, rdb, leases, now.UnixMilli()+time.Minute.Milliseconds())
	for i, r := range replies {
		if r.Err != nil || r.Res != want[i] {
			t.Fatalf("lease %d: %v, %v; want %v", i, r.Res, r.Err, want[i])
		}
		if i%3 == 1 {
			continue
		}
		if ttl := rdb.PTTL(ctx, leases[i].Key).Val(); ttl < 59*time.Minute {
			t.Fatalf("lease %d: PTTL %v after its renewal for an hour", i, ttl)
		}
	}
	// Past its deadline, a missing lease is lost: it may have been revoked.
	rdb.Del(ctx, leases[2].Key)
	if r := send(t, rdb, leases[2:3], now.UnixMilli()-1)[0]; r.Err != nil || r.Res != wire.RenewLost {
		t.Fatalf("a lease missing past its deadline: %v, %v; want lost", r.Res, r.Err)
	}
}

func TestRound(t *testing.T) {
	t.Parallel()
	testRound(t, redistest.Start(t).Client())
}

// On a Cluster each lease goes alone (a script must not span slots): no
// CROSSSLOT, every reply as on one node.
func TestRoundCluster(t *testing.T) {
	t.Parallel()
	testRound(t, redistest.StartCluster(t, 3, 0).Client())
}
