package corralprom_test

import (
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// TestReadme: the README's "Metrics with Prometheus" program is Example.
func TestReadme(t *testing.T) {
	readmetest.Program(t, "../README.md", "Metrics with Prometheus", "example_test.go")
}
