package corral

// During a rolling deploy that raised Options.CodecVersion, an instance of
// the older release finds entries written by the newer one (fetch.lua's
// NEWER reply). It cannot decode them, and must not overwrite them, so it
// loads without storing, and keeps what it loaded while that entry stays
// the same (internal/near's Newer).

// overNewer answers f, whose entry a newer release wrote (soft expiry soft):
// from this process's copy for that entry, or by loading without storing.
func (c *Cache) overNewer(f *flight, soft int64) answer {
	if val, ok := c.newer.Get(f.key, soft); ok {
		return answer{val: val, out: outHit}
	}
	val, _, fr, err := c.runLoader(f)
	if err == nil && fr.stored() {
		c.newer.Set(f.key, soft, val)
	}
	return answer{val: val, err: err, out: outMiss}
}
