package main

import (
	"errors"
	"strings"
	"testing"
)

// The soak itself is tested in internal/soak, whose test binary can play
// the workers; here, the command's surface.

func TestSoakHelpDocumentsInvariantsAndDefaults(t *testing.T) {
	t.Parallel()
	out, _, err := corral(t, "soak", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--duration duration", "(default 20s)", "--processes int", "(default 4)",
		"--redis string", "redis-server", "--seed", "--json", "--kill-every", "--delete-every", "--restart-every",
		"1. Loads per key per refresh <= 1, plus 1 per takeover",
		"2. No value older than a Delete after it returned",
		"memory (fail-safe) while it could not use Redis: around a Redis\n     restart, between Redis going down and 650ms after it answered",
		"or while the worker's own breaker was open (a stall)",
		"3. No caller past its deadline: every Fetch returns within 2s + 100ms",
		"4. No error", "5. Fail-open loads per key per worker per Redis restart <= 2",
		"and 650ms after it answered", "exits 1 on any violation, 2 when the soak could not run",
		"a summary on stdout, wrapped at spaces to 80 columns or to the\nterminal's width"} {
		if !strings.Contains(out, want) {
			t.Errorf("soak --help lacks %q:\n%s", want, out)
		}
	}
	for _, hidden := range []string{"--worker", "--strategy"} {
		if strings.Contains(out, hidden) {
			t.Errorf("soak --help shows the hidden %s", hidden)
		}
	}
	root, _, err := corral(t)
	if err != nil || !strings.Contains(root, "soak") {
		t.Errorf("corral help does not list soak (%v):\n%s", err, root)
	}
}

// exitCode is the status main exits with for err.
func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

func TestSoakSetupFailuresExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"soak", "--processes", "0"}, "at least 1 process"},
		{[]string{"soak", "--duration", "0s"}, "duration must be positive"},
		{[]string{"soak", "--strategy", "bogus"}, `unknown strategy "bogus"`},
		{[]string{"soak", "--redis", "http://example"}, "--redis"},
	} {
		_, _, err := corral(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != exitSetup {
			t.Errorf("corral %v = %v (exit %d), want exit %d with %q", tc.args, err, exitCode(err), exitSetup, tc.want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	_, _, err := corral(t, "soak", "--duration", "1s")
	if err == nil || !strings.Contains(err.Error(), "redis-server is not on PATH") || exitCode(err) != exitSetup {
		t.Errorf("soak without redis-server = %v (exit %d), want exit %d saying redis-server is missing", err, exitCode(err), exitSetup)
	}
}

func TestSoakRejectsArgs(t *testing.T) {
	t.Parallel()
	if _, _, err := corral(t, "soak", "extra"); err == nil {
		t.Error("soak extra: no error")
	}
}
