package diagnose

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/errprefix"
	"github.com/corralhq/corral/internal/redisurl"
	"github.com/corralhq/corral/internal/transport"
	"github.com/redis/go-redis/v9"
)

// The steps of Run that read the server: its version, mode and role, its
// eviction policy, and the round-trip time. The rights are tried in
// rights.go.

// version is a redis_version, compared by its numbers.
type version struct {
	nums [3]int
	text string
}

func parseVersion(s string) (version, bool) {
	v := version{text: s}
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, false
		}
		v.nums[i] = n
	}
	return v, true
}

func (v version) before(major, minor int) bool {
	return v.nums[0] < major || v.nums[0] == major && v.nums[1] < minor
}

// serverInfo is what one server says of itself.
type serverInfo struct {
	version, mode, role string // role: "master" or "replica"
}

// askServer reads a server's version, mode and role from HELLO (which
// any user may send), or from INFO where HELLO is unknown (Redis 5). A
// server that answers neither (no right to INFO) gets an empty serverInfo.
func askServer(ctx context.Context, m checkNode) (serverInfo, error) {
	hello, err := m.Do(ctx, "HELLO").Result()
	if err == nil {
		return serverInfo{redisurl.Field(hello, "version"), redisurl.Field(hello, "mode"), redisurl.Field(hello, "role")}, nil
	}
	if !transport.Says(err, transport.Reply) {
		return serverInfo{}, err
	}
	info, err := m.Info(ctx).Result()
	if err != nil {
		if transport.Says(err, transport.Reply) {
			return serverInfo{}, nil
		}
		return serverInfo{}, err
	}
	s := serverInfo{mode: "standalone", role: "master"}
	for _, line := range strings.Split(info, "\n") {
		name, val, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case name == "redis_version":
			s.version = val
		case name == "cluster_enabled" && val == "1":
			s.mode = "cluster"
		case name == "role" && val == "slave":
			s.role = "replica"
		}
	}
	return s, nil
}

// server reports the version (the "redis" Finding) and the mode.
func (k *checker) server(ctx context.Context) error {
	infos := map[string]serverInfo{}
	for addr, m := range k.masters {
		s, err := askServer(ctx, m)
		if err != nil {
			return errorf("HELLO on %s: %w", addrName(addr), err)
		}
		infos[addr] = s
	}
	k.versionFinding(infos)
	k.modeFinding(infos)
	return nil
}

func (k *checker) versionFinding(infos map[string]serverInfo) {
	var seen []string
	known := true
	for _, s := range infos {
		v, ok := parseVersion(s.version)
		if !ok {
			known = false
			continue
		}
		if !slices.Contains(seen, s.version) {
			seen = append(seen, s.version)
		}
		if k.version.text == "" || v.before(k.version.nums[0], k.version.nums[1]) ||
			v.nums[0] == k.version.nums[0] && v.nums[1] == k.version.nums[1] && v.nums[2] < k.version.nums[2] {
			k.version = v
		}
	}
	k.r.Version = k.version.text
	v := k.version
	switch {
	case !known || v.text == "":
		k.r.add("redis", Warning, "version unknown: the user may send neither HELLO nor INFO")
	case v.before(5, 0):
		k.r.add("redis", Failure, "%s: corral's scripts need Redis 5.0 or later (they write after TIME, which needs effects replication)", v.text)
	case len(seen) > 1:
		sort.Strings(seen)
		k.r.add("redis", Warning, "%s, the oldest: the masters run different versions (%s); sharded pub/sub and the near cache need every master to have them", v.text, strings.Join(seen, ", "))
	case v.before(6, 0):
		k.r.add("redis", Warning, "%s: the near cache needs Redis 6 (CLIENT TRACKING), and sharded pub/sub Redis 7", v.text)
	default:
		k.r.add("redis", OK, "%s", v.text)
	}
}

func (k *checker) modeFinding(infos map[string]serverInfo) {
	s := infos[""]
	switch {
	case k.r.Cluster:
		k.r.add("mode", OK, "cluster (%d masters)", k.r.Masters)
	case s.mode == "cluster":
		k.r.add("mode", Failure, "a Cluster node, reached with a client for one server: calls for keys of other nodes' slots would get MOVED; use a Cluster client (redis.NewClusterClient)")
	case s.mode == "sentinel":
		k.r.add("mode", Failure, "a Sentinel, not a data node: reach the master through it with redis.NewFailoverClient")
	case s.role == "replica":
		k.r.add("mode", Failure, "a replica: it refuses writes (READONLY), so nothing would be cached and every miss would load in each process; use the master")
	case s.mode == "":
		k.r.add("mode", Warning, "unknown: the user may send neither HELLO nor INFO")
	default:
		k.r.add("mode", OK, "%s", s.mode)
	}
}

// eviction reports each master's maxmemory-policy, and its maxmemory: a
// policy that evicts breaks a guarantee once Redis is full (WarnPolicies).
func (k *checker) eviction(ctx context.Context) error {
	policies := map[string]string{}
	var full, idle []string // evicting policies, with and without a maxmemory
	var unread error        // why a policy could not be read
	for addr, m := range k.masters {
		p, limit, err := memoryConfig(ctx, m)
		switch {
		case err != nil && !transport.Says(err, transport.Reply) && !errors.Is(err, ErrNoPolicy):
			return errorf("CONFIG GET on %s: %w", addrName(addr), err)
		case err != nil:
			unread = err
			continue
		}
		policies[k.policyKey(addr)] = p
		if !evicts(p) {
			continue
		}
		where := p
		if addr != "" {
			where = addr + " " + p
		}
		if limit > 0 {
			full = append(full, fmt.Sprintf("%s (maxmemory %s)", where, bytesText(limit)))
		} else {
			idle = append(idle, where)
		}
	}
	if unread == nil {
		k.r.Policies = policies
	}
	sort.Strings(full)
	sort.Strings(idle)
	const risk = policyRisk
	switch {
	case len(full) > 0: // a warning, as the Cache's: corral works, with the costs risk says
		k.r.add("eviction", Warning, "%s: when full, Redis evicts corral's keys: %s", strings.Join(full, ", "), risk)
	case unread != nil:
		k.r.missing(RightOf(unread.Error(), k.cfg.Prefix))
		k.r.add("eviction", Warning, "unknown: %v; with a policy that evicts, %s", errprefix.Trim(errPrefix, unread), risk)
	case len(idle) > 0:
		k.r.add("eviction", Warning, "%s with maxmemory 0: nothing is evicted until a maxmemory is set; then %s", strings.Join(idle, ", "), risk)
	case k.r.Cluster:
		k.r.add("eviction", OK, "noeviction on every master")
	default:
		k.r.add("eviction", OK, "noeviction")
	}
	return nil
}

// memoryConfig reads a server's maxmemory-policy and maxmemory (bytes, 0
// for none).
func memoryConfig(ctx context.Context, m redis.Cmdable) (policy string, maxmemory int64, err error) {
	if policy, err = MaxmemoryPolicy(ctx, m); err != nil {
		return "", 0, err
	}
	conf, err := m.ConfigGet(ctx, "maxmemory").Result()
	if err != nil {
		return "", 0, err
	}
	maxmemory, _ = strconv.ParseInt(conf["maxmemory"], 10, 64)
	return policy, maxmemory, nil
}

// bytesText writes n bytes for people.
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// policyKey is the key of the master at addr in Report.Policies: addr, or
// for a single server (addr "") the client's address.
func (k *checker) policyKey(addr string) string {
	if addr != "" {
		return addr
	}
	if c, ok := k.rdb.(*redis.Client); ok && c.Options().Addr != "" {
		return c.Options().Addr
	}
	return "server"
}

// addrName names a master in messages: its address, or "the server".
func addrName(addr string) string {
	if addr == "" {
		return "the server"
	}
	return addr
}

// rtt reports the median round trip of Pings PINGs to the probe's node.
func (k *checker) rtt(ctx context.Context) error {
	var node redis.Cmdable = k.rdb
	if k.node != nil {
		node = k.node
	}
	samples := make([]time.Duration, k.cfg.Pings)
	for i := range samples {
		start := time.Now()
		if err := node.Ping(ctx).Err(); err != nil {
			return errorf("PING: %w", err)
		}
		samples[i] = time.Since(start)
	}
	slices.Sort(samples)
	rtt := samples[len(samples)/2]
	k.r.RTT = rtt
	ms := fmt.Sprintf("%.2f ms (median of %d PINGs)", float64(rtt)/float64(time.Millisecond), k.cfg.Pings)
	switch {
	case rtt >= k.cfg.Timeout:
		k.r.add("rtt", Failure, "%s: at least RedisTimeout (%v), so calls would fail as if Redis were silent, and Fetch fail open", ms, k.cfg.Timeout)
	case rtt >= transport.ProbeAfter:
		k.r.add("rtt", Warning, "%s: hits read inline give up after %v and go through the pipeline, and calls unanswered after %v have their node probed", ms, transport.InlineBound, transport.ProbeAfter)
	default:
		k.r.add("rtt", OK, "%s", ms)
	}
	return nil
}
