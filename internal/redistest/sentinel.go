package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Sentinel is a master, a replica and a Sentinel watching them.
type Sentinel struct {
	Master, Replica, Sentinel *Server
	MasterName                string
}

// StartSentinel starts a master, a replica of it and one Sentinel (quorum
// 1), waits until the Sentinel knows the master, and stops them when t ends.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	master := Start(t)
	replica := Start(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port()))
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor corral 127.0.0.1 %d 1\nsentinel down-after-milliseconds corral 1000\nsentinel failover-timeout corral 5000\n", master.Port())
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	sen := startWith(t, redisproc.Options{Dir: dir, SentinelConfig: conf})
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := sc.GetMasterAddrByName(ctx, "corral").Result()
		cancel()
		if err == nil && len(addr) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel does not know the master: %v", err)
		}
		<-time.After(20 * time.Millisecond) // polling the sentinel, bounded by deadline
	}
	return &Sentinel{Master: master, Replica: replica, Sentinel: sen, MasterName: "corral"}
}
