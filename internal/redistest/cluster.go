package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of private redis-server processes: masters
// with their replicas, on free loopback ports.
type Cluster struct {
	Nodes []*Server // masters first (as created), then replicas
	t     testing.TB
}

// StartCluster starts a cluster of masters, each with replicas replicas,
// waits until every node reports cluster_state:ok, and stops it when t ends.
// Nodes time out after 1 s, so failovers in tests are quick.
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli not found (it comes with redis-server: apt-get install -y redis-server)")
	}
	c := &Cluster{t: t}
	for range masters * (1 + replicas) {
		port, err := clusterPort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := startWith(t, redisproc.Options{Dir: t.TempDir(), Addr: "127.0.0.1:" + strconv.Itoa(port), Args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf",
			"--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no",
			"--repl-diskless-sync-delay", "0", // replicas sync at once, so they can take over
		}})
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitHealthy()
	return c
}

// clusterPort returns a free port whose cluster bus port (port + 10000) is
// free too.
func clusterPort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port pair for a cluster node")
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Client returns a cluster client of c, closed when the test ends.
func (c *Cluster) Client(opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{Addrs: c.Addrs()}
	for _, f := range opts {
		f(o)
	}
	cc := redis.NewClusterClient(o)
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

// WaitHealthy waits until every running node reports cluster_state:ok with
// all 16384 slots served by a master that is up (after a failover: by the
// promoted replica), and every replica has synced with its master; it fails
// the test after 30 s.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.healthy()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: cluster not healthy after 30s: %v", err)
		}
		<-time.After(50 * time.Millisecond) // polling the cluster's state, bounded by deadline
	}
}

func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		repl, rerr := cl.Info(ctx, "replication").Result()
		cl.Close()
		if err = errors.Join(err, rerr); err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("node %s: %s", n.Addr, firstLines(info, 3))
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("replica %s has not synced with its master", n.Addr)
		}
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], " ")
}

// MasterOf returns the node that serves key's slot as master now.
func (c *Cluster) MasterOf(key string) *Server {
	c.t.Helper()
	cc := c.Client()
	m, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		c.t.Fatalf("redistest: master of %q: %v", key, err)
	}
	for _, n := range c.Nodes {
		if n.Addr == m.Options().Addr {
			return n
		}
	}
	c.t.Fatalf("redistest: master %s of %q is not a node of this cluster", m.Options().Addr, key)
	return nil
}

// ReplicaOf returns a replica of master.
func (c *Cluster) ReplicaOf(master *Server) *Server {
	c.t.Helper()
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer cl.Close()
	id, err := cl.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER MYID: %v", err)
	}
	for _, n := range c.Nodes {
		if n == master || !n.Running() {
			continue
		}
		nc := redis.NewClient(&redis.Options{Addr: n.Addr})
		nodes, err := nc.ClusterNodes(ctx).Result()
		nc.Close()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && strings.Contains(f[2], "myself") && strings.Contains(f[2], "slave") && f[3] == id {
				return n
			}
		}
	}
	c.t.Fatalf("redistest: no replica of %s", master.Addr)
	return nil
}

// WaitReplicated waits until master's replicas have every write master has
// taken so far (their replication offsets reach master's), as a test must
// before it kills master and expects the promoted replica to hold what was
// written: replication is asynchronous, and a busy machine delays it.
func (c *Cluster) WaitReplicated(master *Server) {
	c.t.Helper()
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer cl.Close()
	offset := func(info, field string) int64 {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	}
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		c.t.Fatalf("redistest: INFO replication: %v", err)
	}
	want := offset(info, "master_repl_offset")
	replica := c.ReplicaOf(master)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && offset(info, "slave_repl_offset") >= want {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("redistest: replica %s did not reach offset %d of %s within 10s", replica.Addr, want, master.Addr)
		}
		<-time.After(5 * time.Millisecond)
	}
}

// nodeID returns s's cluster node id.
func (c *Cluster) nodeID(s *Server) string {
	c.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer cl.Close()
	id, err := cl.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER MYID of %s: %v", s.Addr, err)
	}
	return id
}

// MoveSlot migrates slot, with its keys, from its master to the master to,
// as resharding does (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE).
func (c *Cluster) MoveSlot(slot int, from, to *Server) {
	c.t.Helper()
	ctx := context.Background()
	src := redis.NewClient(&redis.Options{Addr: from.Addr})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to.Addr})
	defer dst.Close()
	fromID, toID := c.nodeID(from), c.nodeID(to)
	must := func(err error) {
		if err != nil {
			c.t.Fatalf("redistest: move slot %d: %v", slot, err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	host, port, _ := net.SplitHostPort(to.Addr)
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		cl.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID) // replicas refuse; masters must take it
		cl.Close()
	}
}

// Failover makes replica take over its master's slots (CLUSTER FAILOVER on
// the replica) and waits until the cluster is healthy again.
func (c *Cluster) Failover(replica *Server) {
	c.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer cl.Close()
	if err := cl.Do(context.Background(), "CLUSTER", "FAILOVER").Err(); err != nil {
		c.t.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr, err)
	}
	c.WaitHealthy()
}
