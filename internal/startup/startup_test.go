package startup

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/transport"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newServer returns a Server on rdb, a client of one server, its pipeline
// closed when the test ends.
func newServer(t *testing.T, rdb *redis.Client, noShard bool) *Server {
	t.Helper()
	pipe := transport.New(rdb, transport.Config{Timeout: 2 * time.Second, Rand: func() float64 { return 0.5 },
		Breaker: transport.BreakerConfig{Threshold: 5, Cooldown: 2 * time.Second}})
	t.Cleanup(func() { pipe.Close().Wait() })
	return New(pipe, "corral:probe", noShard, true)
}

// start.lua learns, in one command, the pub/sub mode Detect would (the
// first publish the server takes), the rights the ACL user lacks (as
// rights.lua), and the eviction policy; the checks then send nothing.
func TestStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "")
	for _, tc := range []struct {
		name    string
		rules   []string // the ACL user's; nil for the default user
		noShard bool
		mark    byte
		refusal string   // in Mode.Refusal
		refused []string // in Rights, a substring each
	}{
		{"default user", nil, false, wire.AnnounceSharded, "", nil},
		{"DisableShardedPubSub", nil, true, wire.AnnouncePlain, "", nil},
		{"no SPUBLISH", []string{"~*", "&*", "+@all", "-spublish"}, false, wire.AnnouncePlain, "", nil},
		{"no channels", []string{"~*", "+@all"}, false, wire.AnnounceNone, "channel", nil},
		{"no publish", []string{"~*", "&*", "+@all", "-publish", "-spublish"}, false, wire.AnnounceNone, "(PUBLISH)", nil},
		{"no HSTRLEN nor PEXPIRE", []string{"~*", "&*", "+@all", "-hstrlen", "-pexpire"}, false, wire.AnnounceSharded, "", []string{"(HSTRLEN)", "(PEXPIRE)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := srv.Client()
			if tc.rules != nil {
				user := strings.ReplaceAll(tc.name, " ", "_")
				srv.AddUser(t, user, "pw", tc.rules...)
				rdb = srv.Client(func(o *redis.Options) { o.Username, o.Password = user, "pw" })
			}
			s := newServer(t, rdb, tc.noShard)
			m, err := s.Mode.Learn(ctx)
			if err != nil || m.Mark != tc.mark || !strings.Contains(m.Refusal, tc.refusal) || tc.refusal == "" && m.Refusal != "" {
				t.Fatalf("Learn = %+v, %v; want mark %q, refusal with %q", m, err, tc.mark, tc.refusal)
			}
			refused, err := s.Rights(ctx)
			if err != nil || len(refused) != len(tc.refused) {
				t.Fatalf("Rights = %q, %v; want %d refusals", refused, err, len(tc.refused))
			}
			for i, want := range tc.refused {
				if !strings.Contains(refused[i], want) {
					t.Errorf("refusal %d = %q; want it to name %s", i, refused[i], want)
				}
			}
			// CONFIG is renamed away: only start.lua's INFO can have read it.
			policy, err := s.ConfigGet(ctx, "maxmemory-policy")
			if err != nil || policy[""]["maxmemory-policy"] != "allkeys-lru" {
				t.Fatalf("ConfigGet = %v, %v; want start.lua's allkeys-lru", policy, err)
			}
		})
	}
}

// A server that runs no script for the ACL user (EVAL denied) is probed
// command by command, as before start.lua; the rights check then says why
// it could not run, and the policy is read by CONFIG GET.
func TestStart_ScriptsDenied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	srv.AddUser(t, "noeval", "pw", "~*", "&*", "+@all", "-eval", "-evalsha")
	s := newServer(t, srv.Client(func(o *redis.Options) { o.Username, o.Password = "noeval", "pw" }), false)
	if m, err := s.Mode.Learn(ctx); err != nil || m.Mark != wire.AnnounceSharded {
		t.Fatalf("Learn = %+v, %v; want sharded, probed by SPUBLISH", m, err)
	}
	if _, err := s.Rights(ctx); !transport.Says(err, transport.Denied) {
		t.Fatalf("Rights = %v; want EVAL's refusal", err)
	}
	if policy, err := s.ConfigGet(ctx, "maxmemory-policy"); err != nil || policy[""]["maxmemory-policy"] != "noeviction" {
		t.Fatalf("ConfigGet = %v, %v; want CONFIG GET's noeviction", policy, err)
	}
}

// A first peek claims the detection: Learn's callers wait for it; a claim
// that carried none after all (the fold refused) lets them detect on their
// own. One claim at a time, another after one failed, none once the mode
// is known. (notify's TestLearnerClaim: waiters take a claim's mode, or
// its error.)
func TestClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	s := newServer(t, srv.Client(), false)
	if _, _, ok := s.Claim(); !ok {
		t.Fatal("Claim = false before any detection")
	}
	if _, _, ok := s.Claim(); ok {
		t.Fatal("a second Claim while the first is under way = true")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Mode.Learn(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Learn while a claim is under way = %v; want to wait for it, until its context ends", err)
	}
	s.Told(nil, errors.New("i/o timeout"))
	if _, _, ok := s.Claim(); !ok {
		t.Fatal("Claim after a failed one = false")
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if m, err := s.Mode.Learn(ctx); err != nil || m.Mark != wire.AnnounceSharded {
				t.Errorf("Learn after a claim that carried nothing = %+v, %v; want its own detection", m, err)
			}
		})
	}
	s.Told(nil, nil)
	wg.Wait()
	if _, _, ok := s.Claim(); ok {
		t.Fatal("Claim once the mode is known = true")
	}
}

// Without INFO, the policy is read by CONFIG GET; without either, the error
// says both were tried.
func TestStart_PolicyDenied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	for _, tc := range []struct {
		name  string
		rules []string
		want  string // the policy read; "" for an error naming INFO and CONFIG GET
	}{
		{"noinfo", []string{"~*", "&*", "+@all", "-info"}, "allkeys-lru"},
		{"neither", []string{"~*", "&*", "+@all", "-info", "-config"}, ""},
	} {
		srv.AddUser(t, tc.name, "pw", tc.rules...)
		s := newServer(t, srv.Client(func(o *redis.Options) { o.Username, o.Password = tc.name, "pw" }), false)
		policy, err := s.ConfigGet(ctx, "maxmemory-policy")
		switch {
		case tc.want != "" && (err != nil || policy[""]["maxmemory-policy"] != tc.want):
			t.Fatalf("%s: ConfigGet = %v, %v; want %s by CONFIG GET", tc.name, policy, err, tc.want)
		case tc.want == "" && (!transport.Says(err, transport.Denied) || !strings.Contains(err.Error(), "INFO memory")):
			t.Fatalf("%s: ConfigGet = %v, %v; want CONFIG GET's refusal, after INFO's", tc.name, policy, err)
		}
	}
}
