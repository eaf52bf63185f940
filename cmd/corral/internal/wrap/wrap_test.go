package wrap_test

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/cmd/corral/internal/wrap"
	"github.com/creack/pty"
)

// fits fails t for each line of s wider than width.
func fits(t *testing.T, s string, width int) {
	t.Helper()
	for line := range strings.Lines(s) {
		if w := wrap.Width(line); w > width {
			t.Errorf("line of %d columns, over %d: %q", w, width, line)
		}
	}
}

func TestHangingWrapsAtSpaces(t *testing.T) {
	s := "the holder loads 1234567 keys, SETs and DELs the lock; others sleep 100ms and retry with --redis redis://127.0.0.1:6379"
	for _, width := range []int{40, 60, 80} {
		out := wrap.Hanging("  seed    ", s, width)
		t.Logf("width %d:\n%s", width, out)
		fits(t, out, width)
		if !strings.HasPrefix(out, "  seed    the holder") {
			t.Errorf("width %d: the label does not start the first line: %q", width, out)
		}
		// Every word is whole, and the words after the first line are
		// indented under the text.
		if got := strings.Join(strings.Fields(out), " "); got != "seed "+s {
			t.Errorf("width %d: words changed: %q", width, got)
		}
		for _, line := range strings.Split(out, "\n")[1:] {
			if !regexp.MustCompile(`^ {10}\S`).MatchString(line) {
				t.Errorf("width %d: continuation line not indented by 10: %q", width, line)
			}
		}
	}
	if out := wrap.Hanging("Redis:  ", "embedded", 80); out != "Redis:  embedded" {
		t.Errorf("a short line changed: %q", out)
	}
}

// A word wider than a line is the one thing cut; a label too wide for the
// width leaves its text on the next lines.
func TestHangingLongWordsAndNarrowWidths(t *testing.T) {
	url := "redis://user@" + strings.Repeat("a", 70) + ".example.com:6379"
	out := wrap.Hanging("Redis:  ", url+" (a real server)", 40)
	t.Log("\n" + out)
	fits(t, out, 40)
	if got := strings.ReplaceAll(strings.Join(strings.Fields(out)[1:], ""), " ", ""); got != url+"(arealserver)" {
		t.Errorf("the text changed: %q", got)
	}
	out = wrap.Hanging("a label much too long: ", "some text after it", 30)
	if out != "a label much too long:\n  some text after it" {
		t.Errorf("narrow: %q", out)
	}
}

func TestWidthIsDisplayWidth(t *testing.T) {
	for s, want := range map[string]int{
		"":                              0,
		"corral":                        6,
		"\x1b[31mcorral\x1b[0m":         6,
		"生命":                            4,
		"█████":                         5,
		"short\na longer line\n":        13,
		"\x1b[1;36mstrategy\x1b[0m │ x": 12,
	} {
		if got := wrap.Width(s); got != want {
			t.Errorf("Width(%q) = %d, want %d", s, got, want)
		}
	}
}

// Columns is DefaultColumns for a pipe and for a writer that is no file,
// and the terminal's width for a terminal.
func TestColumns(t *testing.T) {
	if got := wrap.Columns(&bytes.Buffer{}); got != 80 {
		t.Errorf("Columns(buffer) = %d, want 80", got)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := wrap.Columns(w); got != 80 {
		t.Errorf("Columns(pipe) = %d, want 80", got)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	for _, cols := range []uint16{132, 57} {
		if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: cols}); err != nil {
			t.Fatal(err)
		}
		if got := wrap.Columns(tty); got != int(cols) {
			t.Errorf("Columns(terminal of %d columns) = %d", cols, got)
		}
	}
	// A terminal that reports no size (0 columns) gets the default.
	if err := pty.Setsize(ptmx, &pty.Winsize{}); err != nil {
		t.Fatal(err)
	}
	if got := wrap.Columns(tty); got != 80 {
		t.Errorf("Columns(terminal of 0 columns) = %d, want 80", got)
	}
}
