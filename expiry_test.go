package corral_test

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/wire"
)

// An entry's hard expiry is its soft expiry plus its stale window, however
// long the commit took on the server: an entry without a stale window must
// not outlive its soft expiry, or fetch.lua would serve it as stale past
// its TTL (and Expire keep it, stale). Here the commit first deletes a key
// of another type at the entry's name, a set of 300,000 members whose DEL
// takes the server tens of milliseconds; commit.lua's PEXPIRE once counted
// the window from after it, and gave the entry a stale window that long.
// The test times the DEL of a twin set and allows half of it: a server
// descheduled between two adjacent commands of the script (a loaded
// machine; no script can rule it out) lengthened the window by 4 ms once.
// bigSet makes KEYS[1] and KEYS[2] sets of the same 300,000 members, added
// alike, 1,000 to a SADD.
const bigSet = `for i = 0, 299 do
  local m = {}
  for j = 1, 1000 do m[j] = 'm' .. (i * 1000 + j) end
  redis.call('SADD', KEYS[1], unpack(m))
  redis.call('SADD', KEYS[2], unpack(m))
end
return 1`

func TestCommit_HardExpiryIsSoftPlusWindow(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		stale  time.Duration
		window int64 // ms
	}{
		{"no stale window", -1, 0},
		{"stale window", time.Minute, 60_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "exact-" + tc.name
			name := wire.EntryName("corral", key)
			twin := "twin-" + key
			if err := e.rdb.Eval(ctx, bigSet, []string{name, twin}).Err(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := e.rdb.Del(ctx, twin).Err(); err != nil {
				t.Fatal(err)
			}
			slack := max(time.Since(start).Milliseconds()/2, 1)
			v, err := e.c.FetchEntry(ctx, key, func(context.Context) (corral.Entry, error) {
				return corral.Entry{Value: []byte("v"), TTL: time.Hour, StaleTTL: tc.stale}, nil
			})
			if err != nil || string(v) != "v" {
				t.Fatalf("FetchEntry = %q, %v", v, err)
			}
			soft, err := e.rdb.HGet(ctx, name, "s").Int64()
			if err != nil {
				t.Fatal(err)
			}
			hard, err := e.rdb.Do(ctx, "PEXPIRETIME", name).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if d := hard - soft; d < tc.window || d > tc.window+slack {
				t.Fatalf("hard expiry %d ms after the soft one; want %d (or up to %d ms more: half the DEL of a twin set)", d, tc.window, slack)
			}
		})
	}
}

// Expire keeps an entry's stale window as it was, however long expire.lua is
// held up on the server: the new soft expiry is the script's clock, and the
// hard one that clock plus the window. Here the entry's soft expiry is
// written with 5 MB of leading spaces (which Lua's tonumber skips), so that
// reading it holds the script up for tens of milliseconds after its TIME.
// PEXPIRE counts from when it runs and PTTL to when it ran, so the script
// must read one just before the other; a version that read TIME again
// before its PEXPIRE (as commit.lua does, where the window comes from
// arguments) shortened the window by the hold-up, 25 ms. Never shorter,
// then; a few ms longer is a server descheduled between the two adjacent
// commands (a loaded machine), which no script can rule out.
func TestExpire_KeepsStaleWindowExactly(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	name := wire.EntryName("corral", "slow-expire")
	const window = 60_000 // ms
	err := e.rdb.Eval(ctx, `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 's', string.rep(" ", 5000000) .. string.format('%d', now + 10000))
redis.call('PEXPIREAT', KEYS[1], now + 10000 + tonumber(ARGV[1]))
return 1`, []string{name}, window).Err()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Expire(ctx, "slow-expire"); err != nil {
		t.Fatal(err)
	}
	soft, err := e.rdb.HGet(ctx, name, "s").Int64()
	if err != nil {
		t.Fatalf("the entry, stale now, should be kept with its new soft expiry: %v", err)
	}
	hard, err := e.rdb.Do(ctx, "PEXPIRETIME", name).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if d := hard - soft; d < window || d > window+20 {
		t.Fatalf("hard expiry %d ms after the new soft one; want %d (or a few ms more: a server descheduled)", d, window)
	}
}
