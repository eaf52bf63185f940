package lock_test

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// The "Distributed lock" section of docs/lock.md (where the README sends
// its readers) is a complete program whose main is the body of this
// package's Example (which go test runs against a real Redis), and whose
// fencedReport is the Example's: the two must not drift apart.
func TestReadmeLock(t *testing.T) {
	const doc = "../docs/lock.md"
	readmetest.Program(t, doc, "Distributed lock", "example_test.go")
	wantType, ok := readmetest.Between(readmetest.Read(t, "example_test.go"), "\n// fencedReport is", "\n// docs/lock.md's program")
	if !ok {
		t.Fatal("example_test.go: no fencedReport before Example")
	}
	section, _ := readmetest.Between(readmetest.Read(t, doc), "\n## Distributed lock\n", "\n## ")
	if gotType, ok := readmetest.Between(section, "\n// fencedReport is", "\nfunc main() {"); !ok || gotType != wantType {
		t.Fatalf("%s's fencedReport differs from example_test.go's:\n--- %s\n%s\n--- Example\n%s", doc, doc, gotType, wantType)
	}
	if !strings.Contains(section, "package main\n") {
		t.Fatalf("%s: the lock program has no package clause", doc)
	}
}
