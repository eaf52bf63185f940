package lock_test

import (
	"os"
	"strings"
	"testing"
)

// The README's "Distributed lock" section is a complete program whose main
// is the body of this package's Example (which go test runs against a real
// Redis), with the test server's address replaced by "localhost:6379", and
// whose fencedReport is the Example's: the two must not drift apart.
func TestReadmeLock(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
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
	wantType, ok := between(string(example), "\n// fencedReport is", "\n// The README's lock section")
	if !ok {
		t.Fatal("example_test.go: no fencedReport before Example")
	}
	section, ok := between(string(readme), "## Distributed lock\n", "\n## ")
	if !ok {
		t.Fatal(`README.md: no "## Distributed lock" section`)
	}
	got, ok := between(section, "\nfunc main() {\n", "\n}\n```")
	if !ok {
		t.Fatal("README.md: the lock section has no complete program (func main)")
	}
	if got+"\n" != want {
		t.Fatalf("README.md's lock main differs from Example in example_test.go:\n--- README\n%s\n--- Example\n%s", got, want)
	}
	if gotType, ok := between(section, "\n// fencedReport is", "\nfunc main() {"); !ok || gotType != wantType {
		t.Fatalf("README.md's fencedReport differs from example_test.go's:\n--- README\n%s\n--- Example\n%s", gotType, wantType)
	}
	if !strings.Contains(section, "package main\n") {
		t.Fatal("README.md: the lock program has no package clause")
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
