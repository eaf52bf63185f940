package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(removeBinary{m})
}

// corral runs the corral command with args and returns its stdout and
// stderr.
func corral(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

// small are the flags of a run small enough for a test.
var small = []string{"--instances", "4", "--goroutines", "50", "--keys", "2", "--origin-latency", "30ms"}

func TestNoArgsPrintsHelp(t *testing.T) {
	t.Parallel()
	out, _, err := corral(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Usage:", "demo", "Replay a cache stampede"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoHelpDocumentsDefaults(t *testing.T) {
	t.Parallel()
	out, _, err := corral(t, "demo", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--instances int", "(default 8)", "(default 250)", "(default 1)",
		"(default 100ms)", "[naive,seed,corral]", "--redis", "--pg", "--json", "embedded",
		`--scenario string`, `stampede or expiry (default "stampede")`, "--duration duration", "(default 5s)",
		"--think duration", "(default 10ms)", "default 1m for stampede", "1s for expiry",
		"--stale-ttl duration", "default 0 for stampede; equal to --ttl for expiry",
		"Without --json, the output fits 80 columns, or the terminal's width"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo --help lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--strategies", "naive,bogus"},
		{"demo", "--instances", "0"},
		{"demo", "--redis", "http://example"},
		{"demo", "extra-arg"},
	} {
		if _, _, err := corral(t, args...); err == nil {
			t.Errorf("corral %v: no error", args)
		}
	}
	// These fail before any run, with a message that names the problem.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--scenario", "bogus"}, `unknown scenario "bogus" (known: stampede, expiry)`},
		{[]string{"demo", "--scenario", "expiry", "--duration", "0s"}, "duration must be positive"},
		{[]string{"demo", "--scenario", "expiry", "--duration", "-1s"}, "duration must be positive"},
		{[]string{"demo", "--scenario", "expiry", "--think", "-1ms"}, "think time is negative"},
		{[]string{"demo", "--scenario", "expiry", "--ttl", "1m"}, "TTL (1m0s) must be shorter than the duration (5s)"},
		{[]string{"demo", "--scenario", "expiry", "--ttl", "0s"}, "demo: --ttl must be at least 1ms"},
		{[]string{"demo", "--stale-ttl", "-1s"}, "demo: --stale-ttl must not be negative"},
		{[]string{"demo", "--duration", "10s"}, "demo: --duration applies only to --scenario expiry"},
		{[]string{"demo", "--think", "5ms"}, "demo: --think applies only to --scenario expiry"},
		{[]string{"demo", "--bogus"}, "demo: unknown flag: --bogus (see 'corral demo --help')"},
		{[]string{"soak", "--bogus"}, "soak: unknown flag: --bogus (see 'corral soak --help')"},
		{[]string{"demo", "--redis", "127.0.0.1:6379"}, `demo: --redis: not a URL: it has no scheme ("127.0.0.1:6379"); write redis://127.0.0.1:6379`},
	} {
		_, _, err := corral(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("corral %v = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// expirySmall are the flags of an expiry run small enough for a test.
var expirySmall = []string{"--scenario", "expiry", "--instances", "4", "--goroutines", "20", "--keys", "2",
	"--origin-latency", "20ms", "--duration", "1s", "--ttl", "250ms", "--think", "5ms"}

// TestDemoExpiryJSON checks the expiry scenario's JSON document and its
// progress bar, which shows the time elapsed on stderr.
func TestDemoExpiryJSON(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out, errOut, err := corral(t, append([]string{"demo", "--json", "--progress", "--redis", srv.URL()}, expirySmall...)...)
	if err != nil {
		t.Fatalf("corral demo --scenario expiry --json: %v\nstderr: %s", err, errOut)
	}
	doc := decodeOne(t, out)
	want := map[string]any{"scenario": "expiry", "duration_seconds": 1.0, "ttl_seconds": 0.25,
		"stale_ttl_seconds": 0.25, "think_ms": 5.0}
	for k, v := range want {
		if doc.Config[k] != v {
			t.Errorf("config %s = %v, want %v", k, doc.Config[k], v)
		}
	}
	if len(doc.Results) != 3 {
		t.Fatalf("want 3 results:\n%s", out)
	}
	for _, res := range doc.Results {
		if res["requests"].(float64) <= 80 || res["errors"].(float64) != 0 {
			t.Errorf("%s: requests %v, errors %v; want more than one per goroutine, no errors",
				res["strategy"], res["requests"], res["errors"])
		}
	}
	if strings.ContainsAny(out, "\r\x1b") || strings.Contains(out, "█") || strings.Contains(out, "s/1s") {
		t.Fatalf("the progress bar leaked into stdout:\n%q", out)
	}
	for _, name := range []string{"naive", "seed", "corral"} {
		if !strings.Contains(errOut, name+" 1.0s/1s") {
			t.Errorf("stderr shows no elapsed time for %s:\n%q", name, errOut)
		}
	}
}

// TestDemoExpiryHuman checks the human output of an expiry run on the
// embedded defaults: the header says what the scenario does, and a line
// per strategy gives its origin loads per key per TTL.
func TestDemoExpiryHuman(t *testing.T) {
	t.Parallel()
	out, errOut, err := corral(t, append([]string{"demo", "--no-progress"}, expirySmall...)...)
	if err != nil {
		t.Fatalf("corral demo --scenario expiry: %v\nstderr: %s", err, errOut)
	}
	t.Log("\n" + out)
	fitsIn(t, out, 80) // a bytes.Buffer is no terminal
	words := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Redis: embedded",
		"corral demo: expiry: 4 instances x 20 goroutines request 2 hot keys for 1s, pausing 5ms between requests; TTL 250ms, corral's stale window 250ms",
		"Origin loads per key per TTL = origin loads / (2 keys x 1s / 0.25s):", "Origin loads", "p99 latency"} {
		if !strings.Contains(words, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, name := range []string{"naive", "seed", "corral"} {
		if !regexp.MustCompile(`(?m)^  ` + name + ` +\d+\.\d\d$`).MatchString(out) {
			t.Errorf("no loads-per-TTL line for %s", name)
		}
	}
}

// TestDemoJSON checks that with --json stdout is exactly one JSON document
// while the progress bar draws on stderr (--progress: stderr is not a
// terminal here).
func TestDemoJSON(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	out, errOut, err := corral(t, append([]string{"demo", "--json", "--progress", "--redis", srv.URL()}, small...)...)
	if err != nil {
		t.Fatalf("corral demo --json: %v\nstderr: %s", err, errOut)
	}
	doc := decodeOne(t, out)
	if len(doc.Results) != 3 || doc.Config["requests_per_strategy"] != 200.0 {
		t.Fatalf("unexpected document:\n%s", out)
	}
	if strings.ContainsAny(out, "\r\x1b") || strings.Contains(out, "█") || strings.Contains(out, "/200)") {
		t.Fatalf("the progress bar leaked into stdout:\n%q", out)
	}
	for _, name := range []string{"naive", "seed", "corral"} {
		if !strings.Contains(errOut, name) || !strings.Contains(errOut, "/200)") {
			t.Errorf("stderr shows no progress for %s:\n%q", name, errOut)
		}
	}
}

// TestDemoHuman checks the human output of a real run: the header, the
// table (a column per strategy on 80 columns) and a bar in each chart for
// every strategy. stderr is not a terminal, so no progress bar is drawn on
// it.
func TestDemoHuman(t *testing.T) {
	t.Parallel()
	out, errOut, err := corral(t, append([]string{"demo"}, small...)...)
	if err != nil {
		t.Fatalf("corral demo: %v\nstderr: %s", err, errOut)
	}
	t.Log("\n" + out)
	if errOut != "" {
		t.Errorf("stderr that is not a terminal got: %q", errOut)
	}
	words := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Redis: embedded", "Origin: ql (embedded)", "+30ms per query",
		"corral demo: stampede: 200 requests at once (4 instances x 50 goroutines) on 2 cold keys",
		"Origin loads", "p99 latency", "Redis commands"} {
		if !strings.Contains(words, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	fitsIn(t, out, 80) // a bytes.Buffer is no terminal
	if !regexp.MustCompile(`(?m)^ +│ +naive │ +seed │ +corral\n─+\nrequests +│ +200 │ +200 │ +200$`).MatchString(out) {
		t.Errorf("no table with a column per strategy and 200 requests each")
	}
	for _, name := range []string{"naive", "seed", "corral"} {
		bar := regexp.MustCompile(`(?m)^` + name + ` +█* +\d+ *$`)
		if got := len(bar.FindAllString(out, -1)); got != 3 {
			t.Errorf("%s has %d chart bars, want 3 (loads, p99, commands)", name, got)
		}
	}
	if regexp.MustCompile(`\x1b\[`).MatchString(out) {
		t.Errorf("colours in output to a non-terminal")
	}
}

// document is the demo's JSON document.
type document struct {
	Config  map[string]any   `json:"config"`
	Results []map[string]any `json:"results"`
}

// decodeOne decodes out, which must hold exactly one JSON document.
func decodeOne(t *testing.T, out string) document {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var doc document
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout holds more than one JSON value (next: %v):\n%s", err, out)
	}
	return doc
}

// `corral --version` and `corral version` exit 0 and print "corral
// <version>" first: a module version, a VCS revision, or "(devel)". Run as
// the built binary, as a user runs it.
func TestVersion(t *testing.T) {
	t.Parallel()
	first := regexp.MustCompile(`^corral (\(devel\)|v\S+|[0-9a-f]{12}(-dirty)?)$`)
	bin := corralBinary(t)
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("corral %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		line, _, _ := strings.Cut(string(out), "\n")
		if !first.MatchString(line) {
			t.Fatalf("corral %s printed %q first; want corral <version>", strings.Join(args, " "), line)
		}
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), runtime.Version()) {
		t.Fatalf("corral version = %q, %v; want the Go release too", out, err)
	}
	// In-process, the same first line.
	if out, _, err := corral(t, "--version"); err != nil || !first.MatchString(strings.TrimSpace(out)) {
		t.Fatalf("--version = %q, %v", out, err)
	}
}

// A bare host:port where a URL is expected exits 2 with the fix, in every
// command that takes one: the built binary, as a user runs it.
func TestSchemelessAddressNamesTheFix(t *testing.T) {
	t.Parallel()
	bin := corralBinary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--redis", "127.0.0.1:6379"}, "write redis://127.0.0.1:6379"},
		{[]string{"demo", "--redis", "127.0.0.1:6379"}, "write redis://127.0.0.1:6379"},
		{[]string{"purge", "--redis", "127.0.0.1:6379", "--all"}, "write redis://127.0.0.1:6379"},
		{[]string{"serve", "--origin", "127.0.0.1:9000", "--redis", "redis://127.0.0.1:1"}, "write http://127.0.0.1:9000"},
		{[]string{"serve", "--origin", "http://127.0.0.1:9000", "--redis", "localhost:6379"}, "write redis://localhost:6379"},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(string(out), tc.want) {
			t.Errorf("corral %s: %v\n%s\nwant a failure with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
