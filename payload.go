package corral

import (
	"errors"
	"time"

	"github.com/corralhq/corral/internal/wire"
	"github.com/klauspost/compress/s2"
)

// A payload is a value as stored in an entry: S2-compressed when
// compression is on and saves space, and never decoded past MaxValueBytes.
// The store encodes and decodes payloads, so the protocol (the scripts, the
// flight) sees only values.

// errBadEntry is wrapped by the error of a fetch whose entry does not decode
// (a corrupt compressed payload, one over MaxValueBytes): the entry is to be
// taken as missing, not Redis as failing.
var errBadEntry = errors.New("corral: the entry does not decode")

// decode returns the value a payload holds: decompressed when it was stored
// compressed, and no larger than MaxValueBytes.
func (s *store) decode(payload []byte, f wire.Flags) ([]byte, error) {
	if !f.Compressed {
		return payload, nil
	}
	n, err := s2.DecodedLen(payload)
	switch {
	case err != nil:
		return nil, errorf("decompress: %w", err)
	case n > s.maxValue:
		return nil, errorf("decompress: %d bytes: %w", n, ErrValueTooLarge)
	}
	v, err := s2.Decode(nil, payload)
	if err != nil {
		return nil, errorf("decompress: %w", err)
	}
	return v, nil
}

// encode returns the payload to store for w, compressed when compression is
// on, w is a value of at least compressMin bytes, and compressing saves space.
func (s *store) encode(w entryWrite) (payload []byte, flags string) {
	if s.compressMin > 0 && w.kind == wire.Value && len(w.value) >= s.compressMin {
		if z := s2.Encode(nil, w.value); len(z) < len(w.value) {
			return z, w.kind.Flags(true)
		}
	}
	return w.value, w.kind.Flags(false)
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
