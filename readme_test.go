package corral_test

import (
	"os"
	"strings"
	"testing"
)

// The README's Quick start is a complete program whose main is the body of
// Example (which go test runs against a real Redis), with the test server's
// address replaced by "localhost:6379": the two must not drift apart.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	want, ok := between(string(example), "\nfunc Example() {\n", "\t// Output:\n")
	if !ok {
		t.Fatal("example_test.go: no func Example with an Output comment")
	}
	want = strings.ReplaceAll(want, "redisAddr", `"localhost:6379"`)
	quick, ok := between(string(readme), "## Quick start\n", "\n## ")
	if !ok {
		t.Fatal(`README.md: no "## Quick start" section`)
	}
	got, ok := between(quick, "\nfunc main() {\n", "\n}\n```")
	if !ok {
		t.Fatal("README.md: the Quick start has no complete program (func main)")
	}
	if got+"\n" != want {
		t.Fatalf("README.md's Quick start main differs from Example in example_test.go:\n--- README\n%s\n--- Example\n%s", got, want)
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

// The README's "Many keys at once" shows the body of ExampleCache_FetchMany
// (which go test runs against a real Redis), unindented, with the test
// server's address replaced by "localhost:6379".
func TestReadmeFetchMany(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_batch_test.go")
	if err != nil {
		t.Fatal(err)
	}
	body, ok := between(string(example), "\nfunc ExampleCache_FetchMany() {\n", "\t// Output:\n")
	if !ok {
		t.Fatal("example_batch_test.go: no func ExampleCache_FetchMany with an Output comment")
	}
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	want := strings.ReplaceAll(strings.Join(lines, "\n"), "redisAddr", `"localhost:6379"`) + "\n"
	section, ok := between(string(readme), "### Many keys at once: FetchMany\n", "\n#")
	if !ok {
		t.Fatal(`README.md: no "### Many keys at once: FetchMany" section`)
	}
	got, ok := between(section, "```go\n", "```")
	if !ok {
		t.Fatal("README.md: the FetchMany section has no code")
	}
	if got != want {
		t.Fatalf("README.md's FetchMany code differs from ExampleCache_FetchMany:\n--- README\n%s\n--- Example\n%s", got, want)
	}
}
