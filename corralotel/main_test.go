package corralotel_test

import (
	"os"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
)

// redisAddr is the address of a redis-server that TestMain starts for the
// Examples, which have no *testing.T to start their own.
var redisAddr string

func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m, "corralotel", &redisAddr)) }
