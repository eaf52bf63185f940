package wire

import (
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/slots"
)

// The key layout: the Redis names of a cache key (a contract, see Names).

// Names are the Redis names of one cache key K under prefix P (a contract:
// users inspect them with redis-cli):
//
//	Entry   P:e:{T}:K  hash: v payload (or z, compressed), s soft expiry
//	                   (server ms), d last load (ms), f flags, t the
//	                   writer's lease token, c its codec version
//	Lease   P:l:{T}:K  string: the lease token, with PX = LeaseTTL; or
//	                   Marker
//	Notice  P:n:{T}:K  pub/sub channel: completion notices
//	Echo    P:n:I:{T}:K:g  pub/sub channel of one process I (EchoName; g
//	                   numbers its echo channels, internal/notify's)
//
// A FetchMany's keys' leases are members of group leases (GroupName),
// and hold token@group instead of the token.
//
// T is K's own hash tag when it has a non-empty one, else the hex FNV-1a
// 64-bit hash of K. All three share one Cluster slot, K is kept whole at the
// end, and the kind sits before the tag, so no two keys share a name.
type Names struct {
	Entry, Lease, Notice string
}

// NewNames returns key's names under prefix.
func NewNames(prefix, key string) Names {
	tag := SlotTag(key)
	return Names{
		Entry:  prefix + ":e:{" + tag + "}:" + key,
		Lease:  prefix + ":l:{" + tag + "}:" + key,
		Notice: prefix + ":n:{" + tag + "}:" + key,
	}
}

// EchoName returns the echo channel of the process id (hex, no braces) for
// notice, the notice channel of a key under prefix: P:n:I:{T}:K (the
// Notifier appends ":g", g its count of echo channels named, in base 36). It shares
// notice's slot, and ACL patterns that cover P:n:*; it is never a notice
// channel (those have '{' where it has I). A waiter subscribes it with
// notice, and fetch.lua publishes on it when it tells the waiter to WAIT,
// so that the number of clients that heard says whether the waiter's
// subscription was on by then.
func EchoName(prefix, notice, id string) string {
	n := len(prefix) + len(":n:")
	return notice[:n] + id + ":" + notice[n:]
}

// Echoes returns EchoName for prefix and a new random process id.
func Echoes(prefix string) func(notice string) string {
	var b [8]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return func(notice string) string { return EchoName(prefix, notice, id) }
}

// EntryName returns the name of key's entry under prefix (NewNames(prefix,
// key).Entry), with one allocation: the hit path needs no other name.
func EntryName(prefix, key string) string {
	if tag, ok := HashTag(key); ok {
		return prefix + ":e:{" + tag + "}:" + key
	}
	var tag [16]byte
	hashHex(&tag, key)
	return prefix + ":e:{" + string(tag[:]) + "}:" + key
}

// SlotTag returns key's hash tag by Redis Cluster's rule (the text between
// the first '{' and the first '}' after it, when not empty), or otherwise a
// 16-digit hex FNV-1a hash of the key.
func SlotTag(key string) string {
	if tag, ok := HashTag(key); ok {
		return tag
	}
	var tag [16]byte
	hashHex(&tag, key)
	return string(tag[:])
}

// hashHex writes the hex of key's 64-bit FNV-1a hash into dst.
func hashHex(dst *[16]byte, key string) {
	h := fnv.New64a()
	h.Write([]byte(key))
	var sum [8]byte
	hex.Encode(dst[:], h.Sum(sum[:0]))
}

// HashTag returns the hash tag Redis Cluster hashes name by, if it has one.
func HashTag(name string) (string, bool) {
	open := strings.IndexByte(name, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(name[open+1:], '}')
	if end <= 0 { // no '}' after the '{', or an empty tag "{}"
		return "", false
	}
	return name[open+1 : open+1+end], true
}

// The records of a prefix's group invalidations (a contract, as Names):
//
//	ClearName(P)      P:c:{P}    string: "clear,tags", the server time of
//	                             the last Clear and of the last tag
//	                             invalidation, hard or soft (0 for none)
//	TagName(P, G)     P:t:{P}:G  string: "hard,soft", the server time of tag
//	                             G's last hard and soft invalidation (0
//	                             for none); it lives as long as the
//	                             longest-lived entry tagged G
//	SweptName(P)      P:s:{P}    string: the epoch of the last Clear swept
//	                             to the end; P:s:{P}:l the sweep's lease
//
// Times are microseconds on the clock of the records' node, as an entry's
// FieldBorn.
// They share one Cluster slot, the prefix's own, so that one script writes
// any of them and one read gets those a hit needs, on one node's clock.
func ClearName(prefix string) string { return prefix + ":c:{" + prefix + "}" }

// ProbeName is prefix's probe: the key the rights' trials write and delete
// again, and the channel the pub/sub mode's probe publishes on, which
// nobody subscribes to (start.lua, rights.lua, corral check).
func ProbeName(prefix string) string { return prefix + ":probe" }

// TagName is the name of tag's record under prefix (see ClearName).
func TagName(prefix, tag string) string { return prefix + ":t:{" + prefix + "}:" + tag }

// SweptName is the record of prefix's last Clear whose cleared entries a
// sweep deleted to the end: string, its epoch; SweptName(P)+":l" is the
// lease of the sweep under way, its holder's token (internal/epochs'
// sweep.lua). In the prefix's slot, beside ClearName.
func SweptName(prefix string) string { return prefix + ":s:{" + prefix + "}" }

// Group is a FetchMany's group lease in one slot (internal/scripts'
// lease.lua): the keys of a batch hold their leases as one, each key's
// lease (its member: Member) living while its group does, so the batch's
// process renews a lease per slot, not per key.
type Group struct {
	// Name is P:b:{S}:id, a string that holds Token (the batch's id) with
	// PX = LeaseTTL. On a Cluster, S is a hash tag of the slot of the key's
	// names (internal/slots); off one, every key of the batch shares one
	// group, S being "all".
	Name, Token string
	PX          time.Duration // the PX of a member's own lease: renewed on its own past half of it (internal/watchdog)
}

// NewGroup returns the group lease id, under prefix, of the batch's key
// key; px is its members' PX.
func NewGroup(prefix, id, key string, cluster bool, px time.Duration) Group {
	s := "all"
	if cluster {
		s = slots.Tag(slots.Of("{" + SlotTag(key) + "}")) // the slot of every name of the key
	}
	return Group{Name: prefix + ":b:{" + s + "}:" + id, Token: id, PX: px}
}

// Keys returns fetch.lua's KEYS: a key's entry and lease, and g's name
// for a member of g.
func (g Group) Keys(entry, lease string) []string {
	if g.Name == "" {
		return []string{entry, lease}
	}
	return []string{entry, lease, g.Name}
}

// Member returns what the lease of a member of the group lease named group
// holds: token@group.
func Member(token, group string) string { return token + "@" + group }
