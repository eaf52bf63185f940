package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// RunMain is the body of a package's TestMain: it starts a redis-server for
// the Examples, which have no *testing.T to start their own, and sets *addr
// to its address; runs the tests; stops the server; and, when they passed,
// fails the run if goroutines leaked. name says whose tests failed to start.
// It returns the exit code.
func RunMain(m *testing.M, name string, addr *string) int {
	dir, err := os.MkdirTemp("", name+"-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := Run(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+" tests:", err)
		return 1
	}
	*addr = srv.Addr
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			return 1
		}
	}
	return code
}
