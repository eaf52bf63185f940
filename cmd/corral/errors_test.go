package main

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
)

// The built binary's stderr says "corral:" once per line: an error's line
// begins with it (each line of a joined error too), a log record says it in
// its message alone (its "err" goes without it), whatever the library, the
// command and its subcommand each put in front of the error.

// logRecord is a line of corral serve's log.
var logRecord = regexp.MustCompile(`^time=\S+ level=`)

// sayOncePerLine fails t unless every line of stderr says "corral:" at
// most once, and every line that is no log record begins with it.
func sayOncePerLine(t *testing.T, what, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		if strings.Count(line, "corral:") > 1 || !logRecord.MatchString(line) && !strings.HasPrefix(line, "corral: ") {
			t.Errorf("%s: a line of stderr does not say corral: once, at the front:\n%s\nin:\n%s", what, line, stderr)
		}
	}
}

func TestErrorsSayCorralOnce(t *testing.T) {
	t.Parallel()
	bin := corralBinary(t)
	srv := redistest.Start(t)
	closed := "redis://" + closedAddr(t)
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"check", "--redis", closed}, nil, "corral: check: Redis unreachable: dial tcp"},
		{[]string{"check", "--redis", srv.URL(), "--prefix", "a{b"}, nil, "corral: check: invalid options: Prefix"},
		{[]string{"demo", "--bogus"}, nil, "corral: demo: unknown flag: --bogus"},
		{[]string{"demo", "--redis", closed}, nil, "corral: demo: cannot reach Redis"},
		{[]string{"serve", "--origin", "ftp://x", "--redis", srv.URL()}, nil, "corral: serve: --origin must be an http:// or https:// URL"},
		{[]string{"serve", "--origin", "http://127.0.0.1:9", "--redis", srv.URL(), "--prefix", "a{b"}, nil,
			"corral: serve: invalid options: Prefix"},
		{[]string{"serve", "--origin", "http://127.0.0.1:9", "--redis", srv.URL()}, []string{"CORRAL_SERVE_NEAR_SIZE=x", "CORRAL_SERVE_BOGUS=1"},
			"corral: CORRAL_SERVE_BOGUS is set, but no flag"},
		{[]string{"no-such-command"}, nil, `corral: unknown command "no-such-command"`},
	} {
		what := "corral " + strings.Join(tc.args, " ")
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), tc.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: %v\n%s\nwant a failure saying %q", what, err, stderr.String(), tc.want)
		}
		sayOncePerLine(t, what, stderr.String())
	}
}

// corral serve with Redis and the origin both down: its warnings and the
// request's log say corral: once per line.
func TestErrorsSayCorralOnceInServeLogs(t *testing.T) {
	t.Parallel()
	s := startSidecar(t, nil, "--origin", "http://"+closedAddr(t), "--redis", "redis://"+closedAddr(t))
	if code, _, err := get(s.URL + "/x"); err != nil || code != http.StatusBadGateway {
		t.Fatalf("GET /x with the origin down: %d, %v; want 502", code, err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	out := s.out.String()
	if !strings.Contains(out, `msg="corral: the origin failed"`) || !strings.Contains(out, "Redis unreachable") {
		t.Fatalf("the log lacks the origin's failure or Redis's:\n%s", out)
	}
	sayOncePerLine(t, "corral serve's log", out)
}
