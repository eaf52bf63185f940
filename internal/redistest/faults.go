package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testkit"
	"github.com/redis/go-redis/v9"
)

// Redis faults that leave the server running: an ACL user without some
// rights or whose password changes, a server out of memory, a replica.

// AddUser creates the ACL user name on s, with password and rules (Redis 7
// denies every channel to a new user unless a rule grants it), replacing
// any user of that name.
func (s *Server) AddUser(t testing.TB, name, password string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">" + password}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := s.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("redistest: ACL SETUSER %s: %v", name, err)
	}
}

// ChangePassword changes the password of the ACL user name under its
// clients (ACL SETUSER resetpass) and closes their connections (CLIENT
// KILL USER), as a password rotation they missed: their next connection
// is refused with WRONGPASS.
func (s *Server) ChangePassword(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	admin := s.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", name, "resetpass", ">rotated-by-redistest").Err(); err != nil {
		t.Fatalf("redistest: ACL SETUSER %s resetpass: %v", name, err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", name).Err(); err != nil {
		t.Fatalf("redistest: CLIENT KILL USER %s: %v", name, err)
	}
}

// OutOfMemory puts s out of memory under noeviction, to stay: its
// maxmemory becomes half the memory it uses, so every write is refused
// with OOM while reads work. (Filled to the brim instead, Redis makes room
// again now and then as it shrinks its client buffers, and a write goes
// through.)
func (s *Server) OutOfMemory(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rdb := s.Client()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil || used < 2 {
		t.Fatalf("redistest: used_memory %q: %v", info["Memory"]["used_memory"], err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	refused(t, rdb, "OOM")
}

// StartReplica starts two servers, the second a replica of the first
// (REPLICAOF), and returns the replica once it is in sync: it serves reads
// and refuses writes with READONLY.
func StartReplica(t testing.TB) *Server {
	t.Helper()
	master := Start(t, "--repl-diskless-sync-delay", "0")
	replica := Start(t)
	ctx := context.Background()
	rdb := replica.Client()
	if err := rdb.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(master.Port())).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF: %v", err)
	}
	testkit.EventuallyEvery(t, startTimeout, 10*time.Millisecond, "redistest: the replica in sync with its master", func() bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	refused(t, rdb, "READONLY")
	return replica
}

// refused fails t unless a write to rdb is refused with code.
func refused(t testing.TB, rdb *redis.Client, code string) {
	t.Helper()
	if err := rdb.Set(context.Background(), "redistest-probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), code+" ") {
		t.Fatalf("redistest: a write: %v; want it refused with %s", err, code)
	}
}
