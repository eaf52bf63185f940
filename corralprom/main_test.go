package corralprom_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
	"go.uber.org/goleak"
)

// redisAddr is the address of a redis-server that TestMain starts for the
// Examples, which have no *testing.T to start their own.
var redisAddr string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "corralprom-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.Run(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corralprom tests:", err)
		return 1
	}
	redisAddr = srv.Addr
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
