package demo_test

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/redistest"
)

// The demo runs on a Redis Cluster given as a comma-separated list, as a
// go-redis cluster URL, or as the address of one of its nodes.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	addrs := cl.Addrs()
	for name, url := range map[string]string{
		"list":     "redis://" + strings.Join(addrs, ","),
		"addr=":    "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2],
		"one node": "redis://" + addrs[1],
	} {
		t.Run(name, func(t *testing.T) {
			cfg := smallConfig()
			cfg.RedisURL = url
			cfg.Strategies = []string{"corral"}
			byName := results(t, run(t, cfg))
			checkCorral(t, byName["corral"], cfg.Keys)
		})
	}
}
