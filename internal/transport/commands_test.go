package transport

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// The plain commands read their replies: PUBLISH and SPUBLISH go out,
// a script's list comes back as strings, CONFIG GET by node ("" off a
// Cluster), TYPE as Redis says it; a reply that refuses is the error.
func TestPlainCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	p := newPipeline(t, rdb, Config{})
	for _, command := range []string{"PUBLISH", "SPUBLISH"} {
		if err := p.Publish(ctx, command, "probe"); err != nil {
			t.Errorf("Publish(%s) = %v", command, err)
		}
	}
	list, err := p.EvalList(ctx, redis.NewScript(`return {KEYS[1], 7, "x"}`), "k")
	if err != nil || !slices.Equal(list, []string{"k", "7", "x"}) {
		t.Errorf("EvalList = %q, %v; want [k 7 x]", list, err)
	}
	if list, err := p.EvalList(ctx, redis.NewScript(`return 1`), "k"); err != nil || list != nil {
		t.Errorf("EvalList of a number = %q, %v; want nil, nil", list, err)
	}
	if _, err := p.EvalList(ctx, redis.NewScript(`return redis.error_reply("NOPERM no")`), "k"); !Says(err, Denied) {
		t.Errorf("EvalList of a refusal = %v; want NOPERM", err)
	}
	cfg, err := p.ConfigGet(ctx, "maxmemory-policy")
	if err != nil || len(cfg) != 1 || cfg[""]["maxmemory-policy"] == "" {
		t.Errorf("ConfigGet = %v, %v; want one node's maxmemory-policy", cfg, err)
	}
	rdb.HSet(ctx, "h", "f", "v")
	for key, want := range map[string]string{"h": "hash", "missing": "none"} {
		if typ, err := p.Type(ctx, key); err != nil || typ != want {
			t.Errorf("Type(%s) = %q, %v; want %q", key, typ, err, want)
		}
	}
	if err := p.Publish(ctx, "NOSUCH", "probe"); err != nil {
		t.Errorf("Publish(anything but SPUBLISH) is PUBLISH; got %v", err)
	}
}

// Refused wraps the errors that say Redis refused a right or a write, and
// returns the others as they are.
func TestRefused(t *testing.T) {
	perm, write := errors.New("permission"), errors.New("write refused")
	for _, tc := range []struct {
		err  error
		want error // wrapped; nil: err itself
	}{
		{nil, nil},
		{reply("NOPERM this user has no permissions to run the 'get' command"), perm},
		{reply("ERR Error running script: The user executing the script can't run this command or subcommand"), perm},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), write},
		{reply("READONLY You can't write against a read only replica."), write},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), nil},
		{ErrCircuitOpen, nil},
	} {
		got := Refused(tc.err, perm, write)
		switch {
		case tc.want == nil && got != tc.err:
			t.Errorf("Refused(%v) = %v; want it unchanged", tc.err, got)
		case tc.want != nil && (!errors.Is(got, tc.want) || !errors.Is(got, tc.err)):
			t.Errorf("Refused(%v) = %v; want it to wrap %v and the reply", tc.err, got, tc.want)
		case tc.want != nil && got.Error() != "corral: "+tc.want.Error()+": "+tc.err.Error():
			t.Errorf("Refused(%v) says %q", tc.err, got)
		}
	}
}
