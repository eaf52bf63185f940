package corral_test

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/wire"
)

// An entry's hard expiry is its soft expiry plus its stale window, to the
// millisecond, however long the commit took on the server: an entry
// without a stale window must not outlive its soft expiry, or fetch.lua
// would serve it as stale past its TTL (and Expire keep it, stale). Here
// the commit first deletes a key of another type at the entry's name, a
// set of 300,000 members whose DEL takes the server tens of milliseconds;
// commit.lua's PEXPIRE once counted the window from after it, and gave the
// entry a stale window that long.
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
			if err := e.rdb.Eval(ctx, "for i = 1, 300000 do redis.call('SADD', KEYS[1], 'm' .. i) end return 1", []string{name}).Err(); err != nil {
				t.Fatal(err)
			}
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
			if d := hard - soft; d < tc.window || d > tc.window+1 {
				t.Fatalf("hard expiry %d ms after the soft one; want %d (or 1 ms more, the clock's rounding)", d, tc.window)
			}
		})
	}
}
