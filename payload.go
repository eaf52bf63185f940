package corral

import (
	"errors"
	"time"

	"github.com/corralhq/corral/internal/wire"
)

// A payload is a value as stored in an entry, encoded by internal/payload:
// the store encodes and decodes payloads, so the protocol (the scripts, the
// flight) sees only values.

// errBadEntry is wrapped by the error of a fetch whose entry does not decode
// (a corrupt compressed payload, one over MaxValueBytes): the entry is to be
// taken as missing, not Redis as failing.
var errBadEntry = errors.New("corral: the entry does not decode")

// decode returns the value a payload holds: decompressed when it was stored
// compressed, and no larger than MaxValueBytes.
func (s *store) decode(payload []byte, f wire.Flags) ([]byte, error) {
	return s.payload.Decode(payload, f.Compressed)
}

// encode returns the payload to store for w, compressed when compression is
// on, w is a value of at least CompressMinBytes, and compressing saves space.
func (s *store) encode(w entryWrite) (payload []byte, flags string) {
	if w.kind != wire.Value {
		return w.value, w.kind.Flags(false)
	}
	payload, compressed := s.payload.Encode(w.value)
	return payload, w.kind.Flags(compressed)
}

// entryWrite is one entry to store: a load's result or a Set.
type entryWrite struct {
	value []byte
	kind  wire.Kind
	soft  time.Duration // soft TTL
	hard  time.Duration // hard TTL: soft + stale window
	took  time.Duration // the load's duration, for XFetch
	// expires, for a soft TTL the loader set (FetchEntry), is when it ends
	// on the local clock (counted from when the loader returned); zero
	// otherwise. A write sent later, a commit sent again, is stored for
	// what remains of it (ttls), so it never outlives it.
	expires time.Time
}

// ttls returns w's soft and hard TTLs for a write sent now.
func (w entryWrite) ttls() (soft, hard time.Duration) {
	if w.expires.IsZero() {
		return w.soft, w.hard
	}
	soft = max(time.Until(w.expires).Truncate(time.Millisecond), time.Millisecond) // not rounded up, as ms would
	return soft, soft + w.hard - w.soft
}
