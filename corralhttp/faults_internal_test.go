package corralhttp

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/corralhq/corral"
)

// TestFaultLogOncePerInterval: a Reason is logged once per faultLogEvery,
// whatever the requests meeting it, and again once the interval is over;
// another Reason has its own line.
func TestFaultLogOncePerInterval(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := &faultLog{log: slog.New(slog.NewTextHandler(&out, nil)), now: func() time.Time { return now }}
	refused := faultOf(fmt.Errorf("%w (for 1ms: %w)", corral.ErrCircuitOpen, errors.New("dial tcp: connection refused")))
	oom := faultOf(fmt.Errorf("%w (OOM)", corral.ErrWriteRefused))
	for i := range 1000 {
		l.seen(fmt.Sprintf("/p%d", i), refused)
		now = now.Add(time.Millisecond) // 1 s in all
	}
	l.seen("/q", oom)
	now = now.Add(faultLogEvery)
	l.seen("/r", refused)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "path=/p0 ") || !strings.Contains(lines[1], "path=/q ") || !strings.Contains(lines[2], "path=/r ") {
		t.Errorf("log:\n%s\nwant three lines: /p0's, /q's, and /r's a minute later", out.String())
	}
}

// reply is a Redis error reply, as go-redis returns them (redis.Error).
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

var _ redis.Error = reply("")

// TestFaultOf: each Redis fault is told apart by corral's sentinels, named
// by its reply's code at most; an error that is not Redis's is no fault.
func TestFaultOf(t *testing.T) {
	wrongpass := reply("WRONGPASS invalid username-password pair or user is disabled.")
	noperm := reply("NOPERM this user has no permissions to run the 'evalsha' command")
	inScript := reply("ERR The user executing the script can't run this command or subcommand script: 2eea16d7, on @user_script:57.")
	readonly := reply("READONLY You can't write against a read only replica.")
	for _, tc := range []struct {
		err     error
		reason  string
		refused bool
	}{
		{fmt.Errorf("corral: fetch: %w: %w", corral.ErrPermission, noperm), "redis denies a right corral needs (NOPERM)", true},
		{fmt.Errorf("corral: fetch: %w: %w", corral.ErrPermission, inScript), "redis denies a right corral needs", true},
		{fmt.Errorf("%w (for 3ms: %w)", corral.ErrCircuitOpen, wrongpass), "redis refuses the cache's calls (WRONGPASS)", true},
		{fmt.Errorf("%w (for 3ms: %w)", corral.ErrCircuitOpen, fmt.Errorf("%w (no reply 220ms after the call was sent)", corral.ErrRedisTimeout)), "redis does not answer", false},
		{fmt.Errorf("%w (OOM)", corral.ErrWriteRefused), "redis refuses writes (OOM)", false},
		{fmt.Errorf("%w: %w", corral.ErrWriteRefused, readonly), "redis refuses writes (READONLY)", false},
		{fmt.Errorf("%w (corral: Redis refuses writes: READONLY You can't write)", corral.ErrWriteRefused), "redis refuses writes (READONLY)", false},
		{corral.ErrCircuitOpen, "redis cannot be used", false},
	} {
		f := faultOf(tc.err)
		if f == nil || f.Reason != tc.reason || f.Refused != tc.refused || !errors.Is(f, tc.err) {
			t.Errorf("faultOf(%v) = %+v; want %q, refused %v", tc.err, f, tc.reason, tc.refused)
			continue
		}
		if shown := f.Reason + f.Serving; strings.Contains(shown, "password") || strings.Contains(shown, "replica.") || strings.Contains(shown, "script") {
			t.Errorf("faultOf(%v): %q; %q shows the server's text", tc.err, f.Reason, f.Serving)
		}
	}
	for _, err := range []error{nil, errOrigin, corral.ErrLoadTimeout, fmt.Errorf("%w: boom", corral.ErrRemoteLoad), wrongpass} {
		if f := faultOf(err); f != nil {
			t.Errorf("faultOf(%v) = %+v; want nil: not a Redis fault", err, f)
		}
	}
}
