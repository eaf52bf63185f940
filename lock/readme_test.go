package lock_test

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// The README's "Distributed lock" section is a complete program whose main
// is the body of this package's Example (which go test runs against a real
// Redis), and whose fencedReport is the Example's: the two must not drift
// apart.
func TestReadmeLock(t *testing.T) {
	readmetest.Program(t, "../README.md", "Distributed lock", "example_test.go")
	wantType, ok := readmetest.Between(readmetest.Read(t, "example_test.go"), "\n// fencedReport is", "\n// The README's lock section")
	if !ok {
		t.Fatal("example_test.go: no fencedReport before Example")
	}
	section, _ := readmetest.Between(readmetest.Read(t, "../README.md"), "\n## Distributed lock\n", "\n## ")
	if gotType, ok := readmetest.Between(section, "\n// fencedReport is", "\nfunc main() {"); !ok || gotType != wantType {
		t.Fatalf("README.md's fencedReport differs from example_test.go's:\n--- README\n%s\n--- Example\n%s", gotType, wantType)
	}
	if !strings.Contains(section, "package main\n") {
		t.Fatal("README.md: the lock program has no package clause")
	}
}
