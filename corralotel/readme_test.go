package corralotel_test

import (
	"testing"

	"github.com/corralhq/corral/internal/readmetest"
)

// TestReadme: the "Tracing with OpenTelemetry" program of
// docs/observability.md (where the README sends its readers) is Example.
func TestReadme(t *testing.T) {
	readmetest.Program(t, "../docs/observability.md", "Tracing with OpenTelemetry", "example_test.go")
}
