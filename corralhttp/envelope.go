package corralhttp

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// A stored response is one corral value: a format byte, the length of its
// metadata (4 bytes, big-endian), the metadata as JSON, then the body as
// is, so a body is neither escaped nor copied into the JSON.
//
// A pass marker ("hit-for-pass", Varnish's term) is a stored value with no
// response in it: it says that the URL's last response could not be shared,
// so requests for it go straight to the origin, in parallel, until it
// expires, instead of queueing behind one load each.

const (
	formatResponse = 'R'
	formatPass     = 'P'
)

// meta is what a stored response keeps besides its body.
type meta struct {
	Status int         `json:"s"`
	Header http.Header `json:"h"`
	// Received is when the response (or the 304 that last refreshed it)
	// came from the origin, in Unix milliseconds.
	Received int64 `json:"r"`
	// Age is the response's age when it was received (its Age header), in
	// seconds.
	Age int64 `json:"a,omitempty"`
	// Fresh is its freshness lifetime, in milliseconds from Received.
	Fresh int64 `json:"f"`
	// Stale is how long after Fresh it may be served stale (the larger of
	// stale-while-revalidate and stale-if-error), in milliseconds.
	Stale int64 `json:"w,omitempty"`
	// Auth says the response may answer a request carrying Authorization
	// (RFC 9111 section 3.5: public, s-maxage or must-revalidate).
	Auth bool `json:"u,omitempty"`
}

// stored is a decoded stored response.
type stored struct {
	meta
	body []byte
}

// encode returns s as a stored value.
func (s *stored) encode() ([]byte, error) {
	m, err := json.Marshal(&s.meta)
	if err != nil {
		return nil, fmt.Errorf("corralhttp: encode a response: %w", err)
	}
	b := make([]byte, 0, 5+len(m)+len(s.body))
	b = append(b, formatResponse)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m)))
	b = append(b, m...)
	return append(b, s.body...), nil
}

// passMarker is the stored value of a pass marker.
var passMarker = []byte{formatPass}

var errBadStored = errors.New("corralhttp: a stored value is not a response")

// decode reads a stored value: a response, or pass true for a pass marker.
// The body returned shares v's memory.
func decode(v []byte) (s *stored, pass bool, err error) {
	if len(v) == 1 && v[0] == formatPass {
		return nil, true, nil
	}
	if len(v) < 5 || v[0] != formatResponse {
		return nil, false, errBadStored
	}
	n := binary.BigEndian.Uint32(v[1:5])
	if uint64(n) > uint64(len(v)-5) {
		return nil, false, errBadStored
	}
	s = new(stored)
	if err := json.Unmarshal(v[5:5+n], &s.meta); err != nil {
		return nil, false, fmt.Errorf("%w: %v", errBadStored, err)
	}
	s.body = v[5+n:]
	return s, false, nil
}

// age is the response's current age at now (RFC 9111 section 4.2.3,
// with the origin's Age as its initial age).
func (s *stored) age(now time.Time) time.Duration {
	return time.Duration(s.Age)*time.Second + now.Sub(time.UnixMilli(s.Received))
}

// fresh reports whether the response is fresh at now.
func (s *stored) fresh(now time.Time) bool {
	return now.Before(time.UnixMilli(s.Received + s.Fresh))
}

// validators returns the response's ETag and Last-Modified, for a
// conditional request.
func (s *stored) validators() (etag, lastModified string) {
	return s.Header.Get("ETag"), s.Header.Get("Last-Modified")
}
