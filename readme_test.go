package corral_test

import (
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// The README's Quick start is a complete program whose main is the body of
// Example (which go test runs against a real Redis), with the test server's
// address replaced by "localhost:6379": the two must not drift apart.
func TestReadmeQuickStart(t *testing.T) {
	readmetest.Program(t, "README.md", "Quick start", "example_test.go")
}

// The README's "Many keys at once" shows the body of ExampleCache_FetchMany
// (which go test runs against a real Redis), unindented.
func TestReadmeFetchMany(t *testing.T) {
	readmetest.Snippet(t, "README.md", "### Many keys at once: FetchMany", "example_batch_test.go", "ExampleCache_FetchMany")
}

// The README's "Values that set their own TTL" shows the body of
// ExampleCache_FetchEntry (which go test runs against a real Redis),
// unindented.
func TestReadmeFetchEntry(t *testing.T) {
	readmetest.Snippet(t, "README.md", "### Values that set their own TTL: FetchEntry", "example_entry_test.go", "ExampleCache_FetchEntry")
}
