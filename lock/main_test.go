package lock_test

import (
	"context"
	_ "embed"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/lock"
	"github.com/redis/go-redis/v9"
)

// redisAddr is the address of a redis-server that TestMain starts for the
// Examples, which have no *testing.T to start their own. Tests start their
// own servers.
var redisAddr string

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role)) // a re-executed test binary playing another process
	}
	os.Exit(redistest.RunMain(m, "lock", &redisAddr))
}

// Time bounds. Tests assert what must happen within a loose bound, several
// times the expected figure, so they hold on a busy machine; what must not
// happen early is checked against the exact figure less a small margin.
const (
	prompt = 2 * time.Second       // for what should take milliseconds
	margin = 30 * time.Millisecond // clock granularity between the test and Redis
)

// newLocks returns a Client on rdb; opts may be nil.
func newLocks(t testing.TB, rdb redis.UniversalClient, opts *lock.Options) *lock.Client {
	t.Helper()
	c, err := lock.New(rdb, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// obtain obtains key or fails the test.
func obtain(t testing.TB, c *lock.Client, key string, ttl time.Duration) *lock.Lock {
	t.Helper()
	l, err := c.Obtain(context.Background(), key, ttl)
	if err != nil {
		t.Fatalf("Obtain(%q): %v", key, err)
	}
	return l
}

// ended waits, at most within, for l to end.
func ended(t testing.TB, l *lock.Lock, within time.Duration, why string) {
	t.Helper()
	select {
	case <-l.Done():
		return
	default:
	}
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("the Lock did not end within %v (%s)", within, why)
	}
}

// notEnded fails the test if l has ended.
func notEnded(t testing.TB, l *lock.Lock, when string) {
	t.Helper()
	select {
	case <-l.Done():
		t.Fatalf("the Lock ended %s", when)
	default:
	}
}

// isErr fails the test unless err matches every one of targets.
func isErr(t testing.TB, what string, err error, targets ...error) {
	t.Helper()
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("%s: error %v, want one matching %v", what, err, target)
		}
	}
}

// taggedNames are the Redis names of a key with its own hash tag tag,
// under the default prefix (the layout of the package doc).
func taggedNames(tag, key string) (lockName, counter string) {
	return "lock:l:{" + tag + "}:" + key, "lock:f:{" + tag + "}:" + key
}

//go:embed testdata/fenced_write.lua
var fencedWriteSrc string

var fencedWrite = redis.NewScript(fencedWriteSrc)

// write writes value to the fenced resource res with fence, and reports
// whether the resource accepted it.
func write(ctx context.Context, rdb redis.UniversalClient, res string, fence int64, value string) (bool, error) {
	n, err := fencedWrite.Run(ctx, rdb, []string{res}, strconv.FormatInt(fence, 10), value).Int64()
	return n == 1, err
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// fnvTag is the tag of a key without a hash tag of its own: the hex of its
// 64-bit FNV-1a hash.
func fnvTag(key string) string {
	h := fnv.New64a()
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}
