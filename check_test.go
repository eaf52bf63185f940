package corral_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Check against real servers, each configured for one fault; the CLI's
// tests (cmd/corral) run the same faults through `corral check`.

// check runs corral.Check and fails t on an error.
func check(t *testing.T, rdb redis.UniversalClient, opts *corral.Options) *corral.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := corral.Check(ctx, rdb, opts)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, f := range r.Findings {
		t.Logf("%-9s %-8s %s", f.Topic, f.Severity, f.Detail)
	}
	return r
}

// finding returns r's Finding on topic, and fails t unless its severity is
// want and its detail contains each of details.
func finding(t *testing.T, r *corral.Report, topic string, want corral.Severity, details ...string) corral.Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.Topic != topic {
			continue
		}
		if f.Severity != want {
			t.Errorf("%s: %s (%s); want %s", topic, f.Severity, f.Detail, want)
		}
		for _, d := range details {
			if !strings.Contains(f.Detail, d) {
				t.Errorf("%s: %q lacks %q", topic, f.Detail, d)
			}
		}
		return f
	}
	t.Fatalf("no %s finding in %+v", topic, r.Findings)
	return corral.Finding{}
}

// worstBesidesRTT is r's worst severity, leaving out the round trip: a
// machine busy enough may take 100 ms for a PING (a warning), and tests
// make no timed assertions.
func worstBesidesRTT(r *corral.Report) corral.Severity {
	worst := corral.SeverityOK
	for _, f := range r.Findings {
		if f.Topic != "rtt" {
			worst = max(worst, f.Severity)
		}
	}
	return worst
}

// A healthy server, default options: every finding ok, in the documented
// order, and the facts behind them; the probe key is gone afterwards.
func TestCheck_Healthy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	r := check(t, rdb, nil)
	var topics []string
	for _, f := range r.Findings {
		topics = append(topics, f.Topic)
	}
	if w := worstBesidesRTT(r); w != corral.SeverityOK {
		t.Errorf("worst finding %v; want every one ok", w)
	}
	if want := []string{"redis", "mode", "pubsub", "eviction", "rights", "tracking", "rtt"}; !slices.Equal(topics, want) {
		t.Fatalf("topics %v; want %v", topics, want)
	}
	if want := redisVersion(t, rdb); r.Version != want {
		t.Fatalf("Version %q; INFO says %q", r.Version, want)
	}
	finding(t, r, "redis", corral.SeverityOK, r.Version)
	finding(t, r, "mode", corral.SeverityOK, "standalone")
	finding(t, r, "pubsub", corral.SeverityOK, "sharded (SPUBLISH, SSUBSCRIBE)")
	finding(t, r, "eviction", corral.SeverityOK, "noeviction")
	if f := r.Findings[6]; !strings.Contains(f.Detail, "ms (median of 10 PINGs)") {
		t.Errorf("rtt: %q", f.Detail) // ok on a quiet machine; a warning past 100 ms
	}
	if r.Cluster || r.Masters != 1 || r.PubSub != "sharded" || len(r.Missing) != 0 ||
		r.Policies[rdb.Options().Addr] != "noeviction" || len(r.Policies) != 1 || r.RTT <= 0 || r.RTT > time.Second {
		t.Fatalf("report %+v", r)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("Err() = %v; want nil", err)
	}
	if n := rdb.DBSize(context.Background()).Val(); n != 0 {
		t.Fatalf("Check left %d keys: %v", n, rdb.Keys(context.Background(), "*").Val())
	}
}

// redisVersion is the redis_version INFO gives.
func redisVersion(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	for _, line := range strings.Split(rdb.Info(context.Background(), "server").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return v
		}
	}
	t.Fatal("INFO server has no redis_version")
	return ""
}

// Users without a key or command right: a failure naming each missing
// right; a user whose rights cover another prefix passes for that prefix;
// the README's ACL rule passes with nothing missing, near cache included.
func TestCheck_MissingRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name    string
		rules   []string
		prefix  string
		missing []string // nil: none, every finding ok
	}{
		{"no EVALSHA, no SET", []string{"~*", "&*", "+@all", "-evalsha", "-set"}, "", []string{"SET", "EVALSHA"}},
		{"no key rights", []string{"~other:*", "&*", "+@all"}, "", []string{"keys corral:*"}},
		{"rights for another prefix", []string{"~app:*", "&app:*", "&__redis__:invalidate", "+@all"}, "", []string{"keys corral:*", "channels corral:*"}},
		{"rights for this prefix", []string{"~app:*", "&app:*", "&__redis__:invalidate", "+@all"}, "app", nil},
		{"the README's rule", readmeACL, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := aclClient(t, srv, strings.ReplaceAll(tc.name, " ", "-"), tc.rules...)
			r := check(t, rdb, &corral.Options{Prefix: tc.prefix, NearCache: corral.NearCacheOptions{Size: 10}})
			for _, m := range tc.missing {
				if !slices.Contains(r.Missing, m) {
					t.Errorf("Missing %q lacks %q", r.Missing, m)
				}
			}
			if tc.missing == nil {
				if len(r.Missing) != 0 || worstBesidesRTT(r) != corral.SeverityOK {
					t.Fatalf("Missing %q, worst %v; want nothing missing, all ok", r.Missing, worstBesidesRTT(r))
				}
				return
			}
			f := finding(t, r, "rights", corral.SeverityFailure, tc.missing[0])
			if err := r.Err(); !errors.Is(err, corral.ErrCheckFailed) || !strings.Contains(err.Error(), f.Detail) {
				t.Fatalf("Err() = %v; want ErrCheckFailed with the rights finding", err)
			}
		})
	}
}

// Channel rights: without them, or with only plain pub/sub, or with
// publishing but not subscribing, corral works (waiters re-check on their
// own): warnings, naming the right, and no failure.
func TestCheck_ChannelRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name, pubsub string
		rules        []string
		noShard      bool
		severity     corral.Severity
		detail       string
		missing      string
	}{
		{"no channels", "none", []string{"~*", "resetchannels", "+@all"}, false, corral.SeverityWarning, "grant &corral:*", "channels corral:*"},
		{"no PUBLISH", "none", []string{"~*", "&*", "+@all", "-publish", "-spublish"}, false, corral.SeverityWarning, "grant +publish", "PUBLISH"},
		{"no SSUBSCRIBE", "sharded", []string{"~*", "&*", "+@all", "-ssubscribe"}, false, corral.SeverityWarning, "SSUBSCRIBE refused", "SSUBSCRIBE"},
		{"no SPUBLISH", "plain", []string{"~*", "&*", "+@all", "-spublish"}, false, corral.SeverityWarning, "plain (PUBLISH, SUBSCRIBE): SPUBLISH refused", "SPUBLISH"},
		{"sharded disabled", "plain", []string{"~*", "&*", "+@all"}, true, corral.SeverityOK, "plain (PUBLISH, SUBSCRIBE): DisableShardedPubSub", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := aclClient(t, srv, strings.ReplaceAll(tc.name, " ", "-"), tc.rules...)
			r := check(t, rdb, &corral.Options{DisableShardedPubSub: tc.noShard})
			finding(t, r, "pubsub", tc.severity, tc.detail)
			if r.PubSub != tc.pubsub || r.Err() != nil {
				t.Fatalf("PubSub %q, Err() %v; want %q, nil", r.PubSub, r.Err(), tc.pubsub)
			}
			if tc.missing != "" && !slices.Contains(r.Missing, tc.missing) {
				t.Fatalf("Missing %q lacks %q", r.Missing, tc.missing)
			}
		})
	}
}

// The near cache's rights: missing ones are a warning with a near cache,
// and only mentioned without one.
func TestCheck_NearCacheRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := aclClient(t, srv, "notrack", "~*", "&corral:*", "+@all", "-client|tracking")
	near := check(t, rdb, &corral.Options{NearCache: corral.NearCacheOptions{Size: 10}})
	finding(t, near, "tracking", corral.SeverityWarning, "CLIENT TRACKING", "channel __redis__:invalidate", "the near cache would serve nothing")
	if want := []string{"CLIENT TRACKING", "channel __redis__:invalidate"}; !slices.Equal(near.Missing, want) || near.Err() != nil {
		t.Fatalf("Missing %q, Err() %v; want %q, nil", near.Missing, near.Err(), want)
	}
	off := check(t, rdb, nil)
	finding(t, off, "tracking", corral.SeverityOK, "CLIENT TRACKING", "needed only by the near cache (off)")
}

// Eviction policies: one that evicts, with maxmemory set or not yet, or one
// the user may not read, is a warning with the Cache's explanation (corral
// works: an evicted lease costs an extra load); noeviction is ok.
func TestCheck_Eviction(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru", "--maxmemory", "64mb")
	admin := srv.Client()
	ctx := context.Background()
	r := check(t, admin, nil)
	finding(t, r, "eviction", corral.SeverityWarning, "allkeys-lru (maxmemory 64.0 MiB)", "at most one extra load", "revocation marker", "noeviction")
	if err := r.Err(); err != nil {
		t.Fatalf("Err() = %v; want nil: an evicting policy is a warning", err)
	}
	if r.Policies[srv.Addr] != "allkeys-lru" || len(r.Policies) != 1 { // by address: no empty key in the JSON

		t.Fatalf("Policies %v", r.Policies)
	}

	admin.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl")
	admin.ConfigSet(ctx, "maxmemory", "0")
	r = check(t, admin, nil)
	finding(t, r, "eviction", corral.SeverityWarning, "volatile-ttl with maxmemory 0")
	if r.Err() != nil {
		t.Fatalf("Err() = %v; want nil: nothing is evicted yet", r.Err())
	}

	admin.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	finding(t, check(t, admin, nil), "eviction", corral.SeverityOK, "noeviction")

	r = check(t, aclClient(t, srv, "noconfig", "~*", "&*", "+@all", "-config"), nil)
	finding(t, r, "eviction", corral.SeverityWarning, "unknown", "config|get")
	if !slices.Equal(r.Missing, []string{"CONFIG GET"}) || r.Policies != nil || r.Err() != nil {
		t.Fatalf("Missing %q, Policies %v, Err() %v", r.Missing, r.Policies, r.Err())
	}
}

// A read-only replica caches nothing: a failure.
func TestCheck_Replica(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	r := check(t, replica.Client(), nil)
	finding(t, r, "mode", corral.SeverityFailure, "a replica", "READONLY")
	if !errors.Is(r.Err(), corral.ErrCheckFailed) {
		t.Fatalf("Err() = %v", r.Err())
	}
}

// A 3-master Cluster: every master's policy is read, pub/sub is sharded;
// a master that evicts is named; a client for one server reaching a
// Cluster node is a failure.
func TestCheck_Cluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	rdb := cl.Client()
	r := check(t, rdb, nil)
	finding(t, r, "mode", corral.SeverityOK, "cluster (3 masters)")
	finding(t, r, "pubsub", corral.SeverityOK, "sharded (SPUBLISH, SSUBSCRIBE)")
	finding(t, r, "eviction", corral.SeverityOK, "noeviction on every master")
	if !r.Cluster || r.Masters != 3 || len(r.Policies) != 3 || r.Err() != nil {
		t.Fatalf("report %+v", r)
	}

	ctx := context.Background()
	evicting := cl.Nodes[1]
	node := evicting.Client()
	node.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu")
	node.ConfigSet(ctx, "maxmemory", "1gb")
	r = check(t, rdb, nil)
	finding(t, r, "eviction", corral.SeverityWarning, evicting.Addr+" allkeys-lfu (maxmemory 1.0 GiB)")
	if r.Policies[evicting.Addr] != "allkeys-lfu" || r.Policies[cl.Nodes[0].Addr] != "noeviction" {
		t.Fatalf("Policies %v", r.Policies)
	}

	r = check(t, cl.Nodes[0].Client(), nil)
	finding(t, r, "mode", corral.SeverityFailure, "a Cluster node, reached with a client for one server")
	if slot := r.Findings[4]; slot.Severity == corral.SeverityOK && cl.MasterOf("corral:probe") != cl.Nodes[0] {
		t.Fatalf("rights %q: ok, though the probe key is on another node (MOVED)", slot.Detail)
	}
}

// A Redis that cannot be reached, or refuses the login, is an error: there
// is no report.
func TestCheck_Unreachable(t *testing.T) {
	t.Parallel()
	addr := refusingAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	r, err := corral.Check(context.Background(), rdb, nil)
	var op *net.OpError
	if r != nil || !errors.As(err, &op) || !strings.Contains(err.Error(), "corral: check: Redis unreachable") {
		t.Fatalf("Check of a closed port = %v, %v; want no report and the dial error", r, err)
	}

	srv := redistest.Start(t)
	aclClient(t, srv, "someone") // exists, with a password...
	wrong := srv.Client(func(o *redis.Options) { o.Username, o.Password = "nobody", "wrong" })
	r, err = corral.Check(context.Background(), wrong, nil)
	if r != nil || err == nil || !strings.Contains(err.Error(), "refused the connection: WRONGPASS") {
		t.Fatalf("Check with a wrong password = %v, %v; want no report and WRONGPASS", r, err)
	}
}

// A slow round trip: past 100 ms a warning, past RedisTimeout a failure.
func TestCheck_SlowRoundTrip(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := redistest.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer rdb.Close()
	rdb.Ping(context.Background()) // connected, before replies slow down
	p.Latency(120 * time.Millisecond)
	r := check(t, rdb, nil)
	finding(t, r, "rtt", corral.SeverityWarning, "hits read inline give up")
	if r.RTT < 120*time.Millisecond || r.Err() != nil {
		t.Fatalf("RTT %v, Err() %v; want at least the proxy's 120ms, no failure", r.RTT, r.Err())
	}
	r = check(t, rdb, &corral.Options{RedisTimeout: 110 * time.Millisecond})
	finding(t, r, "rtt", corral.SeverityFailure, "at least RedisTimeout (110ms)")
}

// Bad input: a nil client and invalid options are ErrInvalidOptions.
func TestCheck_BadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, rdb := range map[string]redis.UniversalClient{"nil": nil, "typed nil": (*redis.Client)(nil)} {
		if r, err := corral.Check(ctx, rdb, nil); r != nil || !errors.Is(err, corral.ErrInvalidOptions) {
			t.Errorf("Check(%s client) = %v, %v; want ErrInvalidOptions", name, r, err)
		}
	}
	srv := redistest.Start(t)
	if r, err := corral.Check(ctx, srv.Client(), &corral.Options{Prefix: "a{b}"}); r != nil || !errors.Is(err, corral.ErrInvalidOptions) {
		t.Errorf("Check with a braced prefix = %v, %v; want ErrInvalidOptions", r, err)
	}
}
