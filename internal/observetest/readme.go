package observetest

import (
	"os"
	"strings"
	"testing"
)

// SameAsExample fails t unless the README at readme has a section titled
// section ("## " + section) holding a complete program whose main is the
// body of the Example in example (a _test.go file), up to its Output
// comment, with redisAddr for "localhost:6379": the README's program is
// then what go test runs, against a real Redis, and checks.
func SameAsExample(t *testing.T, readme, section, example string) {
	t.Helper()
	r, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	e, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	want, ok := between(string(e), "\nfunc Example() {\n", "\t// Output:\n")
	if !ok {
		t.Fatalf("%s: no func Example with an Output comment", example)
	}
	want = strings.ReplaceAll(want, "redisAddr", `"localhost:6379"`)
	text, ok := between(string(r), "\n## "+section+"\n", "\n## ")
	if !ok {
		t.Fatalf("%s: no %q section", readme, "## "+section)
	}
	got, ok := between(text, "\nfunc main() {\n", "\n}\n```")
	if !ok {
		t.Fatalf("%s: the %q section has no complete program (func main)", readme, section)
	}
	if got+"\n" != want {
		t.Fatalf("%s's %q main differs from Example in %s:\n--- README\n%s\n--- Example\n%s", readme, section, example, got, want)
	}
}

// between returns the text of s between the first start and the first end
// after it.
func between(s, start, end string) (string, bool) {
	_, rest, ok := strings.Cut(s, start)
	if !ok {
		return "", false
	}
	in, _, ok := strings.Cut(rest, end)
	return in, ok
}
