package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// server is the benchmark's private redis-server, on a free loopback port,
// with DEBUG enabled (redis-stall pauses it with DEBUG SLEEP). admin is the
// benchmark's own client: flushes, INFO snapshots, pauses.
type server struct {
	*redistest.Server
	dir     string
	admin   *redis.Client
	version string
}

// startServer starts redis-server (redistest: a missing redis-server is an
// error saying how to install it).
func startServer(ctx context.Context) (*server, error) {
	dir, err := os.MkdirTemp("", "corral-bench-redis-")
	if err != nil {
		return nil, err
	}
	s, err := redistest.Run(dir, "--enable-debug-command", "yes")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv := &server{Server: s, dir: dir, admin: redis.NewClient(&redis.Options{Addr: s.Addr})}
	info, err := srv.admin.Info(ctx, "server").Result()
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("bench: INFO server: %w", err)
	}
	srv.version = infoField(info, "redis_version")
	return srv, nil
}

// Close stops the server and removes its directory.
func (s *server) Close() {
	_ = s.admin.Close()
	s.Server.Close()
	_ = os.RemoveAll(s.dir)
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// commandStats is INFO commandstats: calls per command name ("get",
// "client|setinfo", ...).
type commandStats map[string]int64

func (s *server) commandStats(ctx context.Context) (commandStats, error) {
	info, err := s.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("bench: INFO commandstats: %w", err)
	}
	return parseCommandStats(info), nil
}

// parseCommandStats reads lines like
// "cmdstat_get:calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0".
func parseCommandStats(info string) commandStats {
	out := commandStats{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// setUp says which commands are connection set-up (HELLO, AUTH, SELECT,
// CLIENT SETINFO/SETNAME/TRACKING/..., READONLY), which every client library
// sends on each new connection: no count has them.
func setUp(name string) bool {
	base, _, _ := strings.Cut(name, "|")
	switch base {
	case "hello", "auth", "select", "client", "readonly":
		return true
	}
	return false
}

// notCounted says which commands the count of the server's calls leaves
// out: connection set-up, and the benchmark's own (INFO, FLUSHALL, DEBUG,
// CONFIG), which its admin client sends to the same server. The systems'
// clients are counted on the wire, where a CONFIG GET is a system's own
// (corral's eviction-policy check) and counts.
func notCounted(name string) bool {
	base, _, _ := strings.Cut(name, "|")
	switch base {
	case "info", "flushall", "debug", "config":
		return true
	}
	return setUp(name)
}

// sub returns what was executed between before and s, leaving out what
// skip names, and the total.
func (s commandStats) sub(before commandStats, skip func(name string) bool) (map[string]int64, int64) {
	out := map[string]int64{}
	var total int64
	for name, n := range s {
		if skip(name) {
			continue
		}
		if d := n - before[name]; d > 0 {
			out[name] = d
			total += d
		}
	}
	return out, total
}

// sortedNames returns m's keys by decreasing count, then name.
func sortedNames(m map[string]int64) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}
