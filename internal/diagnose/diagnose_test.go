package diagnose

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
	"github.com/corralhq/corral/internal/wire"
	"github.com/redis/go-redis/v9"
)

// The version grading, for servers the tests cannot start (Redis 4 and 5),
// and for masters of different versions.
func TestCheckVersionGrades(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		versions []string
		want     Severity
		detail   string
	}{
		{[]string{"7.0.15"}, OK, "7.0.15"},
		{[]string{"6.2.14"}, OK, "6.2.14"},
		{[]string{"5.0.14"}, Warning, "5.0.14: the near cache needs Redis 6"},
		{[]string{"4.0.14"}, Failure, "4.0.14: corral's scripts need Redis 5.0 or later"},
		{[]string{"7.2.4", "7.0.15", "7.0.9"}, Warning, "7.0.9, the oldest: the masters run different versions (7.0.15, 7.0.9, 7.2.4)"},
		{[]string{"7.0.15", "4.0.1"}, Failure, "4.0.1: corral's scripts need"},
		{[]string{""}, Warning, "version unknown"},
	} {
		k := &checker{r: &Report{}}
		infos := map[string]serverInfo{}
		for i, v := range tc.versions {
			infos[strings.Repeat("n", i)] = serverInfo{version: v}
		}
		k.versionFinding(infos)
		f := k.r.Findings[0]
		if f.Severity != tc.want || !strings.Contains(f.Detail, tc.detail) {
			t.Errorf("%v: severity %d %q; want %d with %q", tc.versions, f.Severity, f.Detail, tc.want, tc.detail)
		}
	}
}

// rightOf names the right in each of Redis's refusals, and nothing for
// other errors.
func TestCheckRightOf(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		"NOPERM this user has no permissions to run the 'evalsha' command":                          "EVALSHA",
		"NOPERM this user has no permissions to run the 'config|get' command":                       "CONFIG GET",
		"NOPERM User app has no permissions to run the 'client|tracking' command":                   "CLIENT TRACKING",
		"NOPERM this user has no permissions to access one of the keys used as arguments":           "keys p:*",
		"NOPERM this user has no permissions to access one of the channels used as arguments":       "channels p:*",
		"ERR The user executing the script can't run this command or subcommand (SET)":              "SET",
		"ERR The user executing the script can't run this command or subcommand script: abc (HSET)": "HSET",
		"ERR The user executing the script can't access at least one of the keys mentioned (GET)":   "keys p:*",
		"MOVED 10570 127.0.0.1:7001": "",
		"ERR unknown command 'CONFIG', with args beginning with: 'GET' 'maxmemory-policy'": "",
	} {
		if got := RightOf(msg, "p"); got != want {
			t.Errorf("RightOf(%q) = %q; want %q", msg, got, want)
		}
	}
}

// rightsScript is a stand-in for internal/scripts/rights.lua: no refusal.
var rightsScript = redis.NewScript(`return {}`)

// A server as corral needs it: every finding is OK but the eviction
// policy's, which the test server leaves at noeviction too.
func TestRunOnAPlainServer(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client()
	r, err := Run(context.Background(), Config{Client: rdb, Prefix: "p", Timeout: 2 * time.Second, Rights: rightsScript, Pings: 3})
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	for _, f := range r.Findings {
		topics = append(topics, f.Topic)
		if f.Severity != OK {
			t.Errorf("%s: severity %d, %s; want OK", f.Topic, f.Severity, f.Detail)
		}
	}
	if got := strings.Join(topics, " "); got != "redis mode pubsub eviction rights tracking rtt" {
		t.Fatalf("topics %s", got)
	}
	if r.PubSub != "sharded" || r.Masters != 1 || len(r.Missing) != 0 || r.RTT <= 0 {
		t.Fatalf("report %+v", r)
	}
}

// The first-use judgements: a policy that evicts is warned of, naming the
// node; one that could not be read is said at info level; a Redis that did
// not answer is to be asked again.
func TestWarnPolicies(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if !WarnPolicies(log, map[string]string{"a:1": "allkeys-lru", "b:2": "noeviction"}, nil) {
		t.Fatal("a policy read was not an answer")
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, `maxmemory-policy="a:1=allkeys-lru"`) {
		t.Fatalf("logged %q; want a warning naming a:1", out)
	}
	if !WarnPolicies(log, nil, ErrNoPolicy) || !strings.Contains(logs.String(), "level=INFO") {
		t.Fatalf("an unread policy: logged %q; want it said at info level", logs.String())
	}
	if WarnPolicies(log, nil, context.DeadlineExceeded) {
		t.Fatal("a Redis that did not answer counts as an answer")
	}
	var pubsub testkit.Buffer
	WarnPubSub(slog.New(slog.NewTextHandler(&pubsub, nil)), wire.AnnounceNone, "NOPERM this user has no permissions to run the 'publish' command", "p", false)
	if out := pubsub.String(); !strings.Contains(out, "may not run PUBLISH") || !strings.Contains(out, "grant=+publish") {
		t.Fatalf("logged %q; want the missing PUBLISH and its grant", out)
	}
}
