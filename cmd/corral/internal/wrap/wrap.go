// Package wrap fits the CLI's human output to a width in display columns:
// DefaultColumns off a terminal (a pipe, a file, a CI log), the terminal's
// own width on one. Text wraps at spaces only (github.com/jedib0t/go-pretty's
// text.WrapSoft), so a number or a flag is never cut in two; a word wider
// than a whole line is. Widths are display widths (a CJK character takes
// two columns), ANSI colour codes not counted.
package wrap

import (
	"io"
	"os"
	"strings"

	"github.com/jedib0t/go-pretty/v6/text"
	"golang.org/x/term"
)

// DefaultColumns is the width of the output off a terminal, and on one
// whose size cannot be read.
const DefaultColumns = 80

// minText is the fewest columns Hanging leaves for the text after its
// label: a narrower line puts the text under the label instead.
const minText = 20

// Columns returns how many display columns a line written to w may take:
// the terminal's width when w is one, DefaultColumns otherwise.
func Columns(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return DefaultColumns
	}
	if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
		return cols
	}
	return DefaultColumns
}

// Width returns the display width of the widest line of s, ANSI escape
// sequences not counted.
func Width(s string) int {
	widest := 0
	for line := range strings.Lines(s) {
		widest = max(widest, text.StringWidthWithoutEscSequences(strings.TrimRight(line, "\n")))
	}
	return widest
}

// Hanging returns label followed by s, wrapped at spaces into lines of at
// most width columns; the lines after the first are indented as far as the
// label is wide, so s reads as one column beside it. Runs of spaces inside a
// wrapped s become one space. When width leaves less than 20 columns beside
// the label, s starts on the next line, indented by two. The result has no
// trailing newline.
func Hanging(label, s string, width int) string {
	indent := Width(label)
	if width-indent < minText && indent > 2 {
		return strings.TrimRight(label, " ") + "\n" + Hanging("  ", s, width)
	}
	lines := strings.Split(text.WrapSoft(s, max(width-indent, 1)), "\n")
	pad := strings.Repeat(" ", indent)
	for i, line := range lines {
		// WrapSoft pads the lines it breaks to the full width.
		line = strings.TrimRight(line, " ")
		if i == 0 {
			lines[i] = label + line
		} else if line != "" {
			lines[i] = pad + line
		}
	}
	return strings.Join(lines, "\n")
}
