package warn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/stats"
	"github.com/corralhq/corral/internal/testkit"
)

var (
	errPermission   = errors.New("corral: permission denied by Redis ACL")
	errWriteRefused = errors.New("corral: Redis refuses writes")
)

// replyErr is a Redis error reply, as go-redis returns it.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// newSet returns a Set logging at debug level into the returned buffer,
// counting into the returned counters, running its background work at once.
func newSet(keyType func(context.Context, string) (string, error)) (*Set, *stats.Counters, *testkit.Buffer) {
	var buf testkit.Buffer
	var c stats.Counters
	s := New(Config{
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Stats:  &c, Permission: errPermission, WriteRefused: errWriteRefused,
		Go:      func(f func(ctx context.Context)) { f(context.Background()) },
		KeyType: keyType,
	})
	return s, &c, &buf
}

// count returns how many lines of out hold each of subs.
func count(out string, subs ...string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// Each refusal counts every time, and warns once a minute (the rest at
// debug level where the warning is Minutely.Log's) or once per key.
func TestSetCountsAndWarns(t *testing.T) {
	s, c, buf := newSet(nil)
	s.NoticeFailed(errors.New("corral: NOPERM channel"))
	s.NoticeFailed(errors.New("NOPERM channel"))
	s.DecodeFailed("a", "int")
	s.DecodeFailed("a", "int")
	s.DecodeFailed("b", "payload")
	s.TooLarge("p:a", 10, 5)
	s.TooLarge("p:a", 10, 5)
	s.CommitFailed("p:a", errors.New("corral: boom"))
	s.CommitFailed("p:a", errors.New("boom"))
	s.NotStored("p:a", errors.New("gone"))
	s.ReleaseFailed("p:a:lease", errors.New("gone"))
	s.RenewFailed("p:a:lease", errors.New("gone"))
	s.RenewFailed("p:a:lease", errors.New("gone"))
	s.FailOpen("a", errors.New("gone"))
	if c.NoticesFailed.Load() != 2 || c.DecodeFailures.Load() != 3 || c.ValuesTooLarge.Load() != 2 || c.RedisErrors.Load() != 5 {
		t.Errorf("counted %+v", c.Snapshot())
	}
	out := buf.String()
	for _, tc := range []struct {
		n    int
		subs []string
	}{
		{1, []string{"level=WARN", "refused to publish a notice", "err=\"NOPERM channel\""}},
		{1, []string{"level=WARN", "does not decode", "key=a", "as=int"}},
		{1, []string{"level=WARN", "does not decode", "key=b", "as=payload"}},
		{1, []string{"level=WARN", "over MaxValueBytes", "key=p:a", "bytes=10", "max=5"}},
		{1, []string{"level=WARN", "storing a load's result failed", "err=boom"}},
		{1, []string{"level=DEBUG", "storing a load's result failed", "err=boom"}},
		{1, []string{"level=DEBUG", "could not be stored"}}, // the commits' minute, shared
		{1, []string{"level=WARN", "releasing a lease failed", "key=p:a:lease"}},
		{1, []string{"level=WARN", "lease renewal failed"}},
		{1, []string{"level=DEBUG", "lease renewal failed"}},
		{1, []string{"level=WARN", "calling the loader directly (fail-open)", "key=a"}},
	} {
		if n := count(out, tc.subs...); n != tc.n {
			t.Errorf("%d lines with %q; want %d:\n%s", n, tc.subs, tc.n, out)
		}
	}
	if s.Recent() != nil {
		t.Errorf("Recent = %v; want nil: nothing here leaves Redis answering", s.Recent())
	}
}

// A right denied is logged once per right (Redis's text, without where in
// a script it was raised), is no Redis error, and Health says so.
func TestSetRights(t *testing.T) {
	s, c, buf := newSet(nil)
	denied := fmt.Errorf("%w: %w", errPermission, replyErr("NOPERM no permissions to run the 'hset' command script: abc, on @user_script:1."))
	if !s.RedisError(context.Background(), denied) {
		t.Error("RedisError of a right denied: want denied")
	}
	s.RightMissing(denied)
	s.RightDenied("NOPERM no permissions to run the 'hset' command")
	s.RightMissing(errors.New("timeout")) // not a right: nothing
	s.RightDenied("NOPERM no permissions to access one of the keys")
	out := buf.String()
	if n := count(out, "level=ERROR", "denies a right", "'hset' command\""); n != 1 {
		t.Errorf("%d errors of the hset right; want 1:\n%s", n, out)
	}
	if n := count(out, "level=ERROR", "denies a right"); n != 2 {
		t.Errorf("%d errors; want 2:\n%s", n, out)
	}
	if c.RedisErrors.Load() != 0 {
		t.Errorf("RedisErrors = %d; want 0: Redis answered", c.RedisErrors.Load())
	}
	if err := s.Recent(); !errors.Is(err, errPermission) {
		t.Errorf("Recent = %v; want the right denied", err)
	}
}

// A write refused counts, warns once a minute, and Health says so for
// HealthWindow.
func TestSetRefusedWrite(t *testing.T) {
	s, c, buf := newSet(nil)
	s.RefusedWrite("OOM")
	s.RefusedWrite("READONLY")
	if c.WritesRefused.Load() != 2 {
		t.Errorf("WritesRefused = %d; want 2", c.WritesRefused.Load())
	}
	if n := count(buf.String(), "level=WARN", "Redis refuses writes", "why=OOM"); n != 1 || strings.Contains(buf.String(), "READONLY") {
		t.Errorf("want one warning, of the first:\n%s", buf.String())
	}
	err := s.Recent()
	if !errors.Is(err, errWriteRefused) || err.Error() != "corral: Redis refuses writes (READONLY)" {
		t.Errorf("Recent = %v; want the last write refused", err)
	}
	s.last.Load().at = time.Now().Add(-HealthWindow) // seen a window ago
	if err := s.Recent(); err != nil {
		t.Errorf("Recent = %v past HealthWindow; want nil", err)
	}
}

// A failed call counts, unless the caller's own context ended.
func TestSetRedisError(t *testing.T) {
	s, c, _ := newSet(nil)
	if s.RedisError(context.Background(), errors.New("timeout")) {
		t.Error("a timeout reported as a right denied")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.RedisError(ctx, context.Canceled)
	if c.RedisErrors.Load() != 1 {
		t.Errorf("RedisErrors = %d; want 1", c.RedisErrors.Load())
	}
}

// A key of another type warns once a minute, naming the type it reads
// apart (or that it was replaced since, or why it could not read it).
func TestSetForeign(t *testing.T) {
	for _, tc := range []struct {
		kind string
		err  error
		want string
	}{
		{"string", nil, "type=string"},
		{"hash", nil, `type="not a hash (replaced since)"`},
		{"none", nil, `type="not a hash (replaced since)"`},
		{"", errors.New("timeout"), `type="unknown (timeout)"`},
	} {
		reads := 0
		s, _, buf := newSet(func(_ context.Context, name string) (string, error) {
			reads++
			if name != "p:k" {
				t.Errorf("TYPE of %q; want p:k", name)
			}
			return tc.kind, tc.err
		})
		s.Foreign("k", "p:k")
		s.Foreign("k", "p:k")
		if n := count(buf.String(), "level=WARN", "a key of another type", "key=k", "name=p:k", tc.want); n != 1 || reads != 1 {
			t.Errorf("%s: %d reads, %d warnings with %s; want 1:\n%s", tc.want, reads, n, tc.want, buf.String())
		}
	}
}

// IsWrongType tells Redis's WRONGTYPE reply from other errors.
func TestIsWrongType(t *testing.T) {
	wrong := replyErr("WRONGTYPE Operation against a key holding the wrong kind of value")
	if !IsWrongType(wrong) || !IsWrongType(fmt.Errorf("peek: %w", wrong)) {
		t.Error("WRONGTYPE not told")
	}
	if IsWrongType(replyErr("ERR wrong")) || IsWrongType(errors.New("WRONGTYPE but no reply")) || IsWrongType(nil) {
		t.Error("another error told as WRONGTYPE")
	}
	// Every peek asks, a hit with no error: that costs no allocation.
	if n := testing.AllocsPerRun(100, func() { IsWrongType(nil) }); n != 0 {
		t.Errorf("IsWrongType(nil) makes %v allocations; want none", n)
	}
}
