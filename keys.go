package corral

import (
	"encoding/hex"
	"hash/fnv"
	"strings"
)

// names are the Redis names of one cache key (DESIGN §3, a contract):
//
//	entry   P:e:{T}:K  hash: v payload, s soft expiry (server ms), d load ms, f flags
//	lease   P:l:{T}:K  string: the lease token, with PX = LeaseTTL
//	notice  P:n:{T}:K  pub/sub channel for completion notices
//
// T is K's own hash tag when it has a non-empty one, else the hex FNV-1a
// 64-bit hash of K. All three share one Cluster slot, K is kept whole at the
// end, and the kind sits before the tag, so no two keys share a name.
type names struct {
	entry, lease, notice string
}

func newNames(prefix, key string) names {
	tag := slotTag(key)
	return names{
		entry:  prefix + ":e:{" + tag + "}:" + key,
		lease:  prefix + ":l:{" + tag + "}:" + key,
		notice: prefix + ":n:{" + tag + "}:" + key,
	}
}

// slotTag returns key's hash tag by Redis Cluster's rule (the text between
// the first '{' and the first '}' after it, when not empty), or otherwise a
// 16-digit hex FNV-1a hash of the key.
func slotTag(key string) string {
	if tag, ok := hashTag(key); ok {
		return tag
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

func hashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 { // no '}' after the '{', or an empty tag "{}"
		return "", false
	}
	return key[open+1 : open+1+end], true
}
