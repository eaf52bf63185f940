package wire

import (
	"strconv"
	"time"
)

// The scripts' arguments (ARGV), in the order and the units their headers
// give: times in milliseconds, on the server's clock where they are
// instants, numbers as the strings Lua's tonumber reads.

// LargeReply is the largest payload fetch.lua and read.lua send with their
// reply; a larger one is read by a command of its own, bounded by its size.
const LargeReply = 256 << 10

// FetchArgv is fetch.lua's ARGV: the caller's token, the lease's TTL, the
// XFetch draw x, the soft expiry (server ms) of an entry the caller could
// not use (skip; 0 for none), the caller's codec version ("" for any), and
// the soft expiry of an entry to take as stale (a tag's soft invalidation
// reached it; 0 for none), and for a member of a group lease g (token is
// then Member's) the group's token and the PX of the member's own lease.
func FetchArgv(token string, leaseTTL time.Duration, x float64, skip int64, version string, stale int64, g Group, echo string) []any {
	argv := []any{token, leaseTTL.Milliseconds(), strconv.FormatFloat(x, 'g', -1, 64), LargeReply, OptionalMS(skip), version, OptionalMS(stale)}
	switch {
	case g.Name != "":
		argv = append(argv, g.Token, g.PX.Milliseconds())
	case echo != "":
		argv = append(argv, "", "")
	}
	if echo != "" {
		argv = append(argv, echo)
	}
	return argv
}

// CommitArgs are commit.lua's arguments (see its header).
type CommitArgs struct {
	Token      string // the lease's; "" for a Set, which always stores
	Payload    []byte // encoded
	Flags      string // Kind.Flags
	Soft, Hard time.Duration
	Took       time.Duration // the load's duration, for XFetch
	Publish    string        // the publish command, "" for none
	Inline     int           // the largest value sent inline with its notice
	Version    int           // Options.CodecVersion
	LeaseTTL   time.Duration
	// Server ms, 0 for none: until when the lease was surely alive, the
	// soft expiry of the entry it was taken over, the latest soft expiry
	// the entry may get.
	Deadline, Seen, SoftBy int64
	// Born is when the load began (FieldBorn), microseconds on the
	// records' node's clock; 0: the script's own clock (one node).
	Born int64
	Tags string // FieldTags; "" for none
}

// Argv returns a's ARGV.
func (a CommitArgs) Argv() []any {
	return []any{a.Token, a.Payload, a.Flags, MS(a.Soft), MS(a.Hard), FractionalMS(a.Took), a.Publish, a.Inline,
		a.Version, MS(a.LeaseTTL), OptionalMS(a.Deadline), OptionalMS(a.Seen), OptionalMS(a.SoftBy), OptionalMS(a.Born), a.Tags}
}

// RenewArgv is renew.lua's ARGV: token's lease is extended by ttl unless
// the renewal reaches the server after deadline (server ms); held and seen
// are the holder's lease deadline and the soft expiry of the entry it took
// the lease over (0 for none).
func RenewArgv(token string, ttl time.Duration, deadline, held, seen int64) []any {
	return []any{token, ttl.Milliseconds(), deadline, held, OptionalMS(seen)}
}

// ParseRenewal decodes renew.lua's reply.
func ParseRenewal(res any) Renewal {
	v, _ := res.(int64)
	return Renewal(v)
}

// ReleaseArgv is release.lua's ARGV: token hands its lease back, publishing
// notice (when not empty) through publish; hold > 0 keeps refreshes off
// that long (a backoff marker replaces the lease), and mark flags the
// entry: its last refresh failed.
func ReleaseArgv(token, publish, notice string, hold time.Duration, mark bool) []any {
	m, h := 0, int64(0)
	if mark {
		m = 1
	}
	if hold > 0 {
		h = MS(hold)
	}
	return []any{token, publish, notice, h, m}
}

// MS rounds d up to whole milliseconds, at least 1: Redis rejects a 0 TTL.
func MS(d time.Duration) int64 {
	m := (d + time.Millisecond - 1) / time.Millisecond
	return max(int64(m), 1)
}

// FractionalMS formats d in milliseconds with microsecond precision, so
// that XFetch sees loads shorter than a millisecond too.
func FractionalMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', -1, 64)
}

// OptionalMS formats a time in server ms for a script, and 0 (none) as the
// empty string.
func OptionalMS(t int64) string {
	if t == 0 {
		return ""
	}
	return strconv.FormatInt(t, 10)
}
