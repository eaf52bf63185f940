package main

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/creack/pty"
)

// The human output of the commands fits the width: 80 columns off a
// terminal, the terminal's own width on one. Run as the built binary, as a
// user runs it.

// tiny are the flags of the smallest demo runs that still show every part.
var tiny = []string{"--instances", "2", "--goroutines", "10", "--keys", "2", "--origin-latency", "10ms", "--no-progress"}

// fitsIn fails t for each line of out wider than width columns.
func fitsIn(t *testing.T, out string, width int) {
	t.Helper()
	for line := range strings.Lines(out) {
		if w := wrap.Width(line); w > width {
			t.Errorf("a line of %d columns, over %d: %q", w, width, line)
		}
	}
}

// Off a terminal (stdout a pipe), every line of the demo's output is at
// most 80 columns, the table a row per measure. (TestDemoExpiryHuman checks
// the expiry's output, in-process.)
func TestDemoFits80ColumnsInAPipe(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(corralBinary(t), append([]string{"demo"}, tiny...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("corral demo: %v\n%s", err, stderr.String())
	}
	t.Logf("\n%s", out)
	fitsIn(t, string(out), 80)
	if !regexp.MustCompile(`(?m)^peak origin concurrency +│ +\d+ │ +\d+ │ +\d+$`).Match(out) {
		t.Errorf("no row per measure in the table")
	}
	if bytes.Contains(out, []byte("\x1b[")) {
		t.Errorf("colours in output to a pipe")
	}
}

// On a terminal, the demo uses its width: on 200 columns, the widest table,
// a row per strategy.
func TestDemoUsesTheTerminalsWidth(t *testing.T) {
	t.Parallel()
	out := runOnTerminal(t, 200, corralBinary(t), append([]string{"demo"}, tiny...)...)
	t.Logf("\n%s", out)
	fitsIn(t, out, 200)
	plain := regexp.MustCompile(`\x1b\[[0-9;]*m`).ReplaceAllString(out, "")
	for _, row := range []string{`strategy │ requests │ origin loads │ peak origin conc\. │ origin ms │ p50 ms │ p99 ms │ max ms │ Redis commands │ errors`,
		`naive( │ +[0-9.]+){9}`, `seed( │ +[0-9.]+){9}`, `corral( │ +[0-9.]+){9}`} {
		if !regexp.MustCompile(`(?m)^ *` + row + `$`).MatchString(plain) {
			t.Errorf("no table row matching %s", row)
		}
	}
}

// On a terminal of 60 columns, corral check wraps a long finding at spaces
// under its text.
func TestCheckUsesTheTerminalsWidth(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru", "--maxmemory", "32mb")
	out := runOnTerminal(t, 60, corralBinary(t), "check", "--redis", srv.URL())
	t.Logf("\n%s", out)
	fitsIn(t, out, 60)
	if !regexp.MustCompile(`(?m)^eviction   warning: allkeys-lru \(maxmemory 32\.0 MiB\): when\n {11}full, Redis evicts`).MatchString(out) {
		t.Errorf("the eviction warning is not wrapped under its text")
	}
}

// runOnTerminal runs bin with args, its stdout a terminal of cols columns
// (stderr a buffer), and returns what it wrote there, "\r\n" read as "\n".
func runOnTerminal(t *testing.T, cols uint16, bin string, args ...string) string {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = tty, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the child holds it now; reads end when it exits
	var out bytes.Buffer
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(&out, ptmx)
		copied <- err
	}()
	waitErr := cmd.Wait()
	// Linux ends a read of the terminal whose other end closed with EIO.
	if err := <-copied; err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("read the terminal: %v", err)
	}
	if waitErr != nil {
		t.Fatalf("corral %s: %v\n%s", strings.Join(args, " "), waitErr, stderr.String())
	}
	return strings.ReplaceAll(out.String(), "\r\n", "\n")
}

// A short soak prints its summary in lines of at most 80 columns to a
// pipe, every word of it whole.
func TestSoakSummaryFits80Columns(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(corralBinary(t), "soak", "--duration", "2s", "--processes", "2", "--no-progress")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("corral soak: %v\n%s", err, stderr.String())
	}
	t.Logf("\n%s", out)
	fitsIn(t, string(out), 80)
	summary := strings.Join(strings.Fields(string(out)), " ")
	if !regexp.MustCompile(`^soak: 2s, seed \d+, 2 processes \(\d+ killed/restarted\), .*, \d+ fetches, 0 errors.*, violations: 0$`).MatchString(summary) {
		t.Errorf("summary, its lines joined: %q", summary)
	}
}
