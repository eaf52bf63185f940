package corralotel_test

import (
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// TestReadme: the README's "Tracing with OpenTelemetry" program is Example.
func TestReadme(t *testing.T) {
	readmetest.Program(t, "../README.md", "Tracing with OpenTelemetry", "example_test.go")
}
