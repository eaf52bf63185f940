package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/corralhq/corral/internal/redistest"
)

// `corral check` against real servers, each configured for one fault. The
// grading itself is tested in the root package (check_test.go).

// runCheck runs corral check with args and returns stdout, stderr and the
// exit status main would use.
func runCheckCmd(t *testing.T, args ...string) (stdout, stderr string, code int, err error) {
	t.Helper()
	stdout, stderr, err = corral(t, append([]string{"check"}, args...)...)
	if err != nil {
		code = exitCode(err)
	}
	t.Logf("corral check %s: exit %d, %v\n%s", strings.Join(args, " "), code, err, stdout)
	// Off a terminal, every line of the human output fits 80 columns.
	for line := range strings.Lines(stdout) {
		if slices.Contains(args, "--json") {
			break
		}
		if w := wrap.Width(line); w > wrap.DefaultColumns {
			t.Errorf("corral check %s: a line of %d columns: %q", strings.Join(args, " "), w, line)
		}
	}
	return stdout, stderr, code, err
}

// hasLine fails t unless out has a line for topic matching pattern, its
// text's continuation lines (indented under it) joined to it.
func hasLine(t *testing.T, out, topic, pattern string) {
	t.Helper()
	out = strings.ReplaceAll(out, "\n"+strings.Repeat(" ", 11), " ")
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(topic) + ` +` + pattern + `$`)
	if !re.MatchString(out) {
		t.Errorf("no %s line matching %q in:\n%s", topic, pattern, out)
	}
}

// okVerdict is the verdict line of a server without fault: ok, or a warning
// about the round trip on a machine busy enough (tests make no timed
// assertions).
const okVerdict = `ok(, with warnings: rtt)?`

// setUser creates an ACL user with password pw on srv.
func setUser(t *testing.T, srv *redistest.Server, name, pw string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + pw}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
}

func TestCheckHealthy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out, _, code, err := runCheckCmd(t, "--redis", srv.URL())
	if code != 0 || err != nil {
		t.Fatalf("exit %d (%v); want 0", code, err)
	}
	hasLine(t, out, "server", regexp.QuoteMeta(srv.URL()))
	hasLine(t, out, "redis", `\d+\.\d+\.\d+`)
	hasLine(t, out, "mode", "standalone")
	hasLine(t, out, "pubsub", `sharded \(SPUBLISH, SSUBSCRIBE\)`)
	hasLine(t, out, "eviction", "noeviction")
	hasLine(t, out, "rights", `EVAL, EVALSHA and the commands of corral's scripts, on keys corral:\*`)
	hasLine(t, out, "tracking", "CLIENT TRACKING, CLIENT ID and __redis__:invalidate: .*")
	hasLine(t, out, "rtt", `(warning: )?\d+\.\d\d ms \(median of 10 PINGs\).*`)
	hasLine(t, out, "verdict", okVerdict)
}

// An ACL user lacking rights: exit 1, naming what is missing. Its
// password is not printed.
func TestCheckMissingRights(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	setUser(t, srv, "app", "hunter2-secret", "~app:*", "&app:*", "+@all", "-evalsha")
	url := "redis://app:hunter2-secret@" + srv.Addr
	out, errOut, code, err := runCheckCmd(t, "--redis", url, "--prefix", "app")
	if code != exitCheckFailed {
		t.Fatalf("exit %d (%v); want %d", code, err, exitCheckFailed)
	}
	hasLine(t, out, "server", regexp.QuoteMeta("redis://app:xxxxx@"+srv.Addr))
	hasLine(t, out, "rights", "FAIL: missing: EVALSHA: .*")
	hasLine(t, out, "verdict", "FAIL: rights would break a guarantee of corral's")
	if err.Error() != "check: FAIL: rights" {
		t.Errorf("error %q", err)
	}
	for _, s := range []string{out, errOut, err.Error()} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("the password was printed: %q", s)
		}
	}
	// The same user under the default prefix lacks its keys and channels.
	out, _, code, _ = runCheckCmd(t, "--redis", url)
	hasLine(t, out, "rights", `FAIL: missing: keys corral:\*, EVALSHA: .*`)
	hasLine(t, out, "pubsub", `warning: none: PUBLISH refused .*`)
	if code != exitCheckFailed {
		t.Fatalf("exit %d; want %d", code, exitCheckFailed)
	}
}

// An eviction policy (volatile-lru with maxmemory, as many managed Redis
// services default to) is a warning with the library's explanation: exit 0.
func TestCheckEvictionPolicy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "volatile-lru", "--maxmemory", "32mb")
	out, _, code, _ := runCheckCmd(t, "--redis", srv.URL())
	hasLine(t, out, "eviction", `warning: volatile-lru \(maxmemory 32\.0 MiB\): when full, Redis evicts corral's keys: a lease evicted during its load costs at most one extra load.*noeviction evicts nothing.*`)
	if code != 0 {
		t.Fatalf("exit %d; want 0: an evicting policy is a warning\n%s", code, out)
	}
	// --json names the server's policy by its address: no empty key.
	out, _, _, _ = runCheckCmd(t, "--redis", srv.URL(), "--json")
	if strings.Contains(out, `"":`) || !strings.Contains(out, `"`+srv.Addr+`": "volatile-lru"`) {
		t.Fatalf("--json policies: want them by address, no empty key:\n%s", out)
	}
}

// A 3-master Cluster, given as a cluster URL or as one node's address:
// cluster and sharded pub/sub, exit 0; --json says the same.
func TestCheckCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	a := cl.Addrs()
	for _, url := range []string{
		"redis://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2],
		"redis://" + a[1],
	} {
		out, _, code, err := runCheckCmd(t, "--redis", url)
		if code != 0 {
			t.Fatalf("exit %d (%v); want 0", code, err)
		}
		hasLine(t, out, "mode", `cluster \(3 masters\)`)
		hasLine(t, out, "pubsub", `sharded \(SPUBLISH, SSUBSCRIBE\)`)
		hasLine(t, out, "eviction", "noeviction on every master")
		hasLine(t, out, "verdict", okVerdict)
	}
	out, _, code, _ := runCheckCmd(t, "--redis", "redis://"+a[2], "--json")
	var doc struct {
		Server   string            `json:"server"`
		OK       bool              `json:"ok"`
		Cluster  bool              `json:"cluster"`
		Masters  int               `json:"masters"`
		PubSub   string            `json:"pubsub"`
		Policies map[string]string `json:"policies"`
		RTTms    float64           `json:"rtt_ms"`
		Findings []struct {
			Topic, Severity, Detail string
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out)
	}
	if code != 0 || !doc.OK || !doc.Cluster || doc.Masters != 3 || doc.PubSub != "sharded" ||
		len(doc.Policies) != 3 || doc.RTTms <= 0 || len(doc.Findings) != 7 || doc.Findings[1].Detail != "cluster (3 masters)" {
		t.Fatalf("exit %d, document %+v", code, doc)
	}
}

// An unreachable address: exit 1, saying so.
func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	out, _, code, err := runCheckCmd(t, "--redis", "redis://"+addr)
	if code != exitCheckFailed || !strings.Contains(err.Error(), "check: Redis unreachable") {
		t.Fatalf("exit %d (%v); want %d, unreachable", code, err, exitCheckFailed)
	}
	hasLine(t, out, "redis", "FAIL: Redis unreachable: dial tcp "+regexp.QuoteMeta(addr)+": connect: connection refused")
	hasLine(t, out, "verdict", "FAIL: Redis could not be checked")

	out, _, code, _ = runCheckCmd(t, "--redis", "redis://"+addr, "--json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitCheckFailed ||
		doc["ok"] != false || !strings.Contains(doc["error"].(string), "connection refused") {
		t.Fatalf("exit %d, document %v (%v)", code, doc, err)
	}
}

// A rediss:// URL for a server without TLS: the handshake gets no answer,
// and the error says what to look at rather than only "deadline exceeded".
func TestCheckTLSMismatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out, _, code, err := runCheckCmd(t, "--redis", "rediss://"+srv.Addr, "--timeout", "500ms")
	if code != exitCheckFailed || err == nil || !strings.Contains(err.Error(), "does the server speak TLS") {
		t.Fatalf("exit %d (%v); want %d and a hint at TLS", code, err, exitCheckFailed)
	}
	hasLine(t, out, "verdict", "FAIL: Redis could not be checked")
}

// A password in the URL is never printed: not in the report, not in the
// JSON, not in errors, whether it is right, wrong, or the URL does not
// parse.
func TestCheckPasswordNotPrinted(t *testing.T) {
	t.Parallel()
	const pw = "s3cret-Pass"
	srv := redistest.Start(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url  string
		code int
		want string // in stdout or the error
	}{
		{"redis://:" + pw + "@" + srv.Addr, 0, "redis://:xxxxx@" + srv.Addr},
		{"redis://default:" + pw + "@" + srv.Addr + "/0", 0, "redis://default:xxxxx@" + srv.Addr + "/0"},
		{"redis://:" + pw + "x@" + srv.Addr, exitCheckFailed, "WRONGPASS"},
		{"redis://:" + pw + "@" + srv.Addr + ",127.0.0.1:1", exitCheckFailed, "redis://:xxxxx@" + srv.Addr + ",127.0.0.1:1"},
		{"redis://:" + pw + "@127.0.0.1:bad", exitUsage, "invalid port"},
	} {
		for _, format := range [][]string{nil, {"--json"}} {
			out, errOut, code, err := runCheckCmd(t, append([]string{"--redis", tc.url}, format...)...)
			all := out + errOut
			if err != nil {
				all += err.Error()
			}
			if code != tc.code || !strings.Contains(all, tc.want) {
				t.Errorf("%s: exit %d, want %d with %q", format, code, tc.code, tc.want)
			}
			if strings.Contains(all, pw) {
				t.Fatalf("the password was printed:\n%s", all)
			}
		}
	}
}

// Usage errors exit 2 and say what is wrong.
func TestCheckUsage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "check: --redis is required (or CORRAL_CHECK_REDIS) (see 'corral check --help')"},
		{[]string{"--redis", srv.URL(), "extra"}, `check: unexpected argument "extra"`},
		{[]string{"--bogus"}, "check: unknown flag: --bogus (see 'corral check --help')"},
		{[]string{"--redis", srv.URL(), "--timeout", "0s"}, "check: --timeout must be positive"},
		{[]string{"--redis", srv.URL(), "--prefix", "a{b"}, "check: invalid options: Prefix \"a{b\" contains a brace"},
		{[]string{"--redis", "http://" + srv.Addr}, fmt.Sprintf("check: --redis: not a Redis URL: its scheme is \"http\"; write redis://%s (rediss://%s for TLS)", srv.Addr, srv.Addr)},
		{[]string{"--redis", srv.Addr}, fmt.Sprintf("check: --redis: not a URL: it has no scheme (%q); write redis://%s (rediss://%s for TLS)", srv.Addr, srv.Addr, srv.Addr)},
		{[]string{"--redis", "user:pw-in-redis@" + srv.Addr}, "check: --redis: not a URL: it has no scheme (no part of it is shown: it may hold the password); write redis://user:password@host:port"},
	} {
		_, _, code, err := runCheckCmd(t, tc.args...)
		if code != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("corral check %v: exit %d, %v; want %d with %q", tc.args, code, err, exitUsage, tc.want)
		}
	}
}

func TestCheckHelp(t *testing.T) {
	t.Parallel()
	out, _, err := corral(t, "check", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--redis string", "--prefix string", `(default "corral")`, "--near-cache", "--json",
		"--timeout duration", "(default 10s)", "Exit status: 0 when nothing fails (warnings allowed), 1 on a failure",
		"2 for a usage error", "A failure breaks a guarantee", "A warning means corral works", "CORRAL_CHECK_REDIS",
		"wrapped at spaces under its text to 80\ncolumns, or to the terminal's width on one"} {
		if !strings.Contains(out, want) {
			t.Errorf("check --help lacks %q:\n%s", want, out)
		}
	}
	root, _, err := corral(t)
	if err != nil || !strings.Contains(root, "check") {
		t.Errorf("corral help does not list check (%v):\n%s", err, root)
	}
}

// corral check and corral demo take their flags from CORRAL_CHECK_* and
// CORRAL_DEMO_* variables too, as serve does from CORRAL_SERVE_*: a URL
// with a password stays off the command line. The command line wins; a
// misspelt variable is an error naming it.
func TestCheckAndDemoReadTheEnvironment(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("CORRAL_CHECK_REDIS", srv.URL())
	out, _, code, err := runCheckCmd(t)
	if code != 0 || err != nil {
		t.Fatalf("check with CORRAL_CHECK_REDIS: exit %d, %v\n%s", code, err, out)
	}
	hasLine(t, out, "server", regexp.QuoteMeta(srv.URL()))
	// The command line wins over the variable.
	t.Setenv("CORRAL_CHECK_REDIS", "redis://127.0.0.1:1")
	if out, _, code, err := runCheckCmd(t, "--redis", srv.URL()); code != 0 || err != nil {
		t.Fatalf("check --redis over a variable: exit %d, %v\n%s", code, err, out)
	}
	t.Setenv("CORRAL_CHECK_REDIS", srv.URL())
	t.Setenv("CORRAL_CHECK_NEAR_CACHE", "maybe")
	if _, _, code, err := runCheckCmd(t); code != exitUsage || err == nil || !strings.Contains(err.Error(), "CORRAL_CHECK_NEAR_CACHE") {
		t.Fatalf("a bad CORRAL_CHECK_NEAR_CACHE: exit %d, %v; want a usage error naming it", code, err)
	}
	os.Unsetenv("CORRAL_CHECK_NEAR_CACHE")
	t.Setenv("CORRAL_CHECK_REDIS_URL", "x")
	if _, _, code, err := runCheckCmd(t); code != exitUsage || err == nil || !strings.Contains(err.Error(), "CORRAL_CHECK_REDIS_URL is set, but no flag of corral check has that variable") {
		t.Fatalf("a misspelt variable: exit %d, %v; want a usage error naming it", code, err)
	}
	os.Unsetenv("CORRAL_CHECK_REDIS_URL")

	t.Setenv("CORRAL_DEMO_REDIS", "127.0.0.1:6379") // read, hence the demo's own error for it
	if _, _, err := corral(t, "demo"); err == nil || !strings.Contains(err.Error(), "write redis://127.0.0.1:6379") {
		t.Fatalf("demo with CORRAL_DEMO_REDIS: %v; want the variable's value used", err)
	}
	t.Setenv("CORRAL_DEMO_REDIS", srv.URL())
	t.Setenv("CORRAL_DEMO_KEYZ", "2")
	if _, _, err := corral(t, "demo"); err == nil || !strings.Contains(err.Error(), "CORRAL_DEMO_KEYZ is set, but no flag of corral demo") {
		t.Fatalf("a misspelt CORRAL_DEMO_ variable: %v; want an error naming it", err)
	}
}

// A Redis at maxclients: corral check says so and what to do, not
// "unreachable" nor "broken pipe", and exits 1. The built binary, as a user
// runs it, and --json.
func TestCheckNamesMaxClients(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxclients", "1")
	if err := srv.Client().Ping(context.Background()).Err(); err != nil { // the one slot, kept
		t.Fatal(err)
	}
	const reason = "Redis refused the connection: ERR max number of clients reached: every connection it allows is taken (maxclients): raise maxclients"
	cmd := exec.Command(corralBinary(t), "check", "--redis", srv.URL())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitCheckFailed {
		t.Fatalf("corral check at maxclients: %v; want exit %d\n%s%s", err, exitCheckFailed, stdout.String(), stderr.String())
	}
	hasLine(t, stdout.String(), "redis", "FAIL: "+regexp.QuoteMeta(reason)+".*")
	hasLine(t, stdout.String(), "verdict", "FAIL: Redis could not be checked")
	if !strings.HasPrefix(stderr.String(), "corral: check: "+reason) {
		t.Errorf("stderr %q; want the reason", stderr.String())
	}
	sayOncePerLine(t, "corral check at maxclients", stderr.String())
	out, _, code, _ := runCheckCmd(t, "--redis", srv.URL(), "--json")
	var doc struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.OK || !strings.HasPrefix(doc.Error, "check: "+reason) || code != exitCheckFailed {
		t.Fatalf("--json at maxclients: exit %d, %+v (%v); want ok false and the reason", code, doc, err)
	}
}
