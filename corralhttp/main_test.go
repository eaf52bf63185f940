package corralhttp_test

import (
	"os"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
)

// exampleRedis is the address of the redis-server the Examples use.
var exampleRedis string

func TestMain(m *testing.M) { os.Exit(redistest.RunMain(m, "corralhttp", &exampleRedis)) }
