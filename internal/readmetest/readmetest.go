// Package readmetest keeps the code of the README and of docs/ the code go
// test runs: each program or snippet they show is the body of an Example
// function, which go test runs against a real Redis and checks, with the
// test server's address (redisAddr) where the page says "localhost:6379".
package readmetest

import (
	"os"
	"strings"
	"testing"
)

// Program fails t unless the README at readme has a section "## "+section
// holding a complete program whose main is the body of func Example in
// the file example, up to its Output comment.
func Program(t *testing.T, readme, section, example string) {
	t.Helper()
	want := exampleBody(t, example, "Example")
	text, ok := Between(Read(t, readme)+"\n## ", "\n## "+section+"\n", "\n## ") // the last section ends with the file
	if !ok {
		t.Fatalf("%s: no %q section", readme, "## "+section)
	}
	got, ok := Between(text, "\nfunc main() {\n", "\n}\n```")
	if !ok {
		t.Fatalf("%s: the %q section has no complete program (func main)", readme, section)
	}
	if got+"\n" != want {
		t.Fatalf("%s's %q main differs from Example in %s:\n--- README\n%s\n--- Example\n%s", readme, section, example, got, want)
	}
}

// Snippet fails t unless the first Go code block under the README's
// heading (a whole line, "### ..." say) is the body of func fn in the file
// example, up to its Output comment, one tab less indented.
func Snippet(t *testing.T, readme, heading, example, fn string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(exampleBody(t, example, fn), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	want := strings.Join(lines, "\n") + "\n"
	text, ok := Between(Read(t, readme), "\n"+heading+"\n", "\n#")
	if !ok {
		t.Fatalf("%s: no %q section", readme, heading)
	}
	got, ok := Between(text, "```go\n", "```")
	if !ok {
		t.Fatalf("%s: the %q section has no Go code", readme, heading)
	}
	if got != want {
		t.Fatalf("%s's %q code differs from %s in %s:\n--- README\n%s\n--- Example\n%s", readme, heading, fn, example, got, want)
	}
}

// exampleBody returns the body of func fn in the file example, up to its
// Output comment, with "localhost:6379" for redisAddr.
func exampleBody(t *testing.T, example, fn string) string {
	t.Helper()
	body, ok := Between(Read(t, example), "\nfunc "+fn+"() {\n", "\t// Output:\n")
	if !ok {
		t.Fatalf("%s: no func %s with an Output comment", example, fn)
	}
	return strings.ReplaceAll(body, "redisAddr", `"localhost:6379"`)
}

// Read returns the file at path, failing t if it cannot.
func Read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Between returns the text of s between the first start and the first end
// after it.
func Between(s, start, end string) (string, bool) {
	_, rest, ok := strings.Cut(s, start)
	if !ok {
		return "", false
	}
	in, _, ok := strings.Cut(rest, end)
	return in, ok
}
