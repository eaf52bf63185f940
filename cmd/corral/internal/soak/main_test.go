package soak_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/corralhq/corral/cmd/corral/internal/soak"
	"go.uber.org/goleak"
)

// TestMain runs the test binary as a soak worker when the orchestrator
// re-executes it with a worker configuration in its environment, and runs
// the tests, checking for leaked goroutines, otherwise.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(soak.WorkerEnv); cfg != "" {
		if err := soak.RunWorker(context.Background(), cfg, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
