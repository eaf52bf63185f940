// Package payload encodes values as entries hold them: S2-compressed when
// compression is on and saves space, and never decoded past a size limit.
// The root's store encodes and decodes payloads, so that the protocol (the
// scripts, the flight) sees only values.
//
// It owns the compression and the size limit. It may not touch Redis, nor
// what an entry is: which payloads may be compressed, and how the flags say
// so, are the store's and internal/wire's.
package payload

import (
	"github.com/corralhq/corral/internal/errprefix"
	"github.com/klauspost/compress/s2"
)

// Codec encodes and decodes payloads. Its zero value never compresses, and
// decodes none.
type Codec struct {
	CompressMin int   // compress values of at least this many bytes; 0: never
	MaxValue    int   // the largest value a compressed payload may decode to, in bytes
	TooLarge    error // wrapped by the error of a payload that decodes larger than MaxValue
}

// Decode returns the value a payload holds: decompressed when it was stored
// compressed, and no larger than MaxValue.
func (c Codec) Decode(payload []byte, compressed bool) ([]byte, error) {
	if !compressed {
		return payload, nil
	}
	n, err := s2.DecodedLen(payload)
	switch {
	case err != nil:
		return nil, errorf("decompress: %w", err)
	case n > c.MaxValue:
		return nil, errorf("decompress: %d bytes: %w", n, c.TooLarge)
	}
	v, err := s2.Decode(nil, payload)
	if err != nil {
		return nil, errorf("decompress: %w", err)
	}
	return v, nil
}

// Encode returns the payload to store for value, and whether it is
// compressed: it is when compression is on, value has at least CompressMin
// bytes, and compressing saves space.
func (c Codec) Encode(value []byte) (payload []byte, compressed bool) {
	if c.CompressMin > 0 && len(value) >= c.CompressMin {
		if z := s2.Encode(nil, value); len(z) < len(value) {
			return z, true
		}
	}
	return value, false
}

func errorf(format string, args ...any) error {
	return errprefix.Errorf(errprefix.Corral, format, args...)
}
