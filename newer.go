package corral

import "github.com/maypok86/otter/v2"

// During a rolling deploy that raised Options.CodecVersion, an instance of
// the older release finds entries written by the newer one (fetch.lua's
// NEWER reply). It cannot decode them, and must not overwrite them, so it
// loads without storing. Loading on every call would multiply origin loads
// for as long as the deploy lasts; instead each older process keeps what it
// loaded over a newer entry, and serves it while that entry stays the same
// (the same soft expiry, server ms). The cost of a rolling deploy is then
// bounded: one load per key per older process per refresh of the newer
// entry, on top of the newer release's one reload per key.

// newerCopy is a value an older release loaded over a newer entry.
type newerCopy struct {
	soft int64 // the newer entry's soft expiry when the value was loaded
	val  []byte
}

// maxNewerCopies bounds the copies a process keeps: the keys it reads
// during a deploy.
const maxNewerCopies = 10000

func newNewerCopies() *otter.Cache[string, newerCopy] {
	// No expiry: a copy is served only while the entry's soft expiry is the
	// one it was loaded over, which changes on every refresh.
	return otter.Must(&otter.Options[string, newerCopy]{MaximumSize: maxNewerCopies})
}

// overNewer answers f, whose entry a newer release wrote (soft expiry soft):
// from this process's copy for that entry, or by loading without storing.
func (c *Cache) overNewer(f *flight, soft int64) answer {
	if cp, ok := c.newer.GetIfPresent(f.key); ok && cp.soft == soft {
		return answer{val: cp.val, out: outHit}
	}
	val, _, fr, err := c.runLoader(f)
	if err == nil && fr.stored() {
		c.newer.Set(f.key, newerCopy{soft: soft, val: val})
	}
	return answer{val: val, err: err, out: outMiss}
}
