package corralprom_test

import (
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// TestReadme: the "Metrics with Prometheus" program of docs/observability.md
// (where the README sends its readers) is Example.
func TestReadme(t *testing.T) {
	readmetest.Program(t, "../docs/observability.md", "Metrics with Prometheus", "example_test.go")
}
