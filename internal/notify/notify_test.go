package notify

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

type noStats struct{}

func (noStats) Subscribed()   {}
func (noStats) Unsubscribed() {}
func (noStats) RedisError()   {}

// While Redis fails, every waiter may fail to subscribe: that is said once
// as a warning, then at debug level, not once per waiter.
func TestSubscribeFailuresWarnOnce(t *testing.T) {
	addr := testkit.RefusingAddr(t) // Redis refuses
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	var logs testkit.Buffer
	n := New(Config{Client: rdb, Stats: noStats{}, Timeout: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Mode: func(ctx context.Context) (byte, error) {
			return 0, errors.New("dial tcp " + addr + ": connect: connection refused")
		}})
	t.Cleanup(func() { n.Close().Wait() })
	for range 20 {
		n.Subscribe(context.Background(), "corral:n:{k}").Close()
	}
	out := logs.String()
	if warns := strings.Count(out, "level=WARN"); warns != 1 {
		t.Fatalf("%d warnings for 20 failed subscriptions; want 1:\n%s", warns, out)
	}
	if debugs := strings.Count(out, "level=DEBUG msg=\"corral: cannot subscribe"); debugs != 19 {
		t.Fatalf("%d debug lines; want the 19 other failures at debug level:\n%s", debugs, out)
	}
}
