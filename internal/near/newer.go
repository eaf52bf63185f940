package near

import "github.com/maypok86/otter/v2"

// During a rolling deploy that raised the codec version, an instance of the
// older release finds entries written by the newer one, which it cannot
// decode and must not overwrite: it loads without storing. Loading on every
// call would multiply origin loads for as long as the deploy lasts; instead
// each older process keeps what it loaded over a newer entry (Newer), and
// serves it while that entry stays the same (the same soft expiry, server
// ms). The cost of a rolling deploy is then bounded: one load per key per
// older process per refresh of the newer entry, on top of the newer
// release's one reload per key.

// maxNewer bounds the values a process keeps: the keys it reads during a
// deploy.
const maxNewer = 10000

// Newer keeps values an older release loaded over entries a newer release
// wrote.
type Newer struct {
	// No expiry: a value is served only while the entry's soft expiry is
	// the one it was loaded over, which changes on every refresh.
	c *otter.Cache[string, newerValue]
}

// newerValue is a value loaded over a newer entry.
type newerValue struct {
	soft int64 // the newer entry's soft expiry when the value was loaded
	val  []byte
}

// NewNewer returns an empty Newer.
func NewNewer() *Newer {
	return &Newer{c: otter.Must(&otter.Options[string, newerValue]{MaximumSize: maxNewer})}
}

// Get returns the value loaded over key's newer entry of soft expiry soft.
func (n *Newer) Get(key string, soft int64) ([]byte, bool) {
	v, ok := n.c.GetIfPresent(key)
	if !ok || v.soft != soft {
		return nil, false
	}
	return v.val, true
}

// Set keeps val, loaded over key's newer entry of soft expiry soft.
func (n *Newer) Set(key string, soft int64, val []byte) {
	n.c.Set(key, newerValue{soft: soft, val: val})
}

// Close stops otter's goroutines.
func (n *Newer) Close() { n.c.StopAllGoroutines() }
