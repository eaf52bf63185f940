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
//
// A vary marker (the format byte, then JSON) names the request headers the
// URL's responses vary on, beyond those in its key: it stands in the URL's
// key when its last response may be shared but not stored (no-cache,
// stale), so that the requests after it go straight to their variant's key
// (vary.go).

const (
	formatResponse = 'R'
	formatPass     = 'P'
	formatVary     = 'V'
)

// meta is what a stored response keeps besides its body.
type meta struct {
	Status int         `json:"s"`
	Header http.Header `json:"h"`
	// Received is when the request for the response (or for the 304 that
	// last refreshed it) was sent to the origin, in Unix milliseconds: its
	// age counts from then (RFC 9111 section 4.2.3).
	Received int64 `json:"r"`
	// Age is the response's age when it was received (its Age header), in
	// seconds.
	Age int64 `json:"a,omitempty"`
	// Fresh is its freshness lifetime, in milliseconds from Received.
	Fresh int64 `json:"f"`
	// Stale is how long after Fresh it may be served stale while it is
	// revalidated (stale-while-revalidate), in milliseconds.
	Stale int64 `json:"w,omitempty"`
	// StaleIfError is how long after Fresh it may be served stale when
	// its revalidation fails (stale-if-error), in milliseconds.
	StaleIfError int64 `json:"e,omitempty"`
	// Auth says the response may answer a request carrying Authorization
	// (RFC 9111 section 3.5: public, s-maxage or must-revalidate).
	Auth bool `json:"u,omitempty"`
	// VaryID is in the keys of the URL's variants (vary.go), when the
	// response varies on headers its key does not hold. A response
	// refreshed keeps it; an invalidation, which deletes the response,
	// loses it, and with it every variant.
	VaryID string `json:"v,omitempty"`
	// OnError marks a stale response served because the origin failed
	// (stale-if-error). Such a value is handed to the requests of one load
	// and never stored.
	OnError bool `json:"x,omitempty"`
	// FailedStatus is, with OnError, the origin's status (500, 502, 503,
	// 504); 0 when it gave none (no answer, a connection broken).
	FailedStatus int `json:"xs,omitempty"`
	// Proto is the protocol version the origin answered with, when it is
	// not 1.1 ("2"), for Via.
	Proto string `json:"p,omitempty"`
	// Tags are the response's surrogate keys (tags.go), from the
	// Surrogate-Key and Cache-Tag headers it came with, which are not
	// kept: a 304 that names none leaves them as they are.
	Tags []string `json:"g,omitempty"`
}

// varyMarker is what a vary marker holds.
type varyMarker struct {
	Names []string `json:"n"` // canonical, sorted
	ID    string   `json:"i"` // the VaryID of the variants' keys
}

// stored is a decoded stored response.
type stored struct {
	meta
	body []byte
	// revalidated: the load that fetched it got a 304 that refreshed it
	// (not stored: it says how this response was fetched, not what it is).
	revalidated bool
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

// encode returns m as a stored value.
func (m *varyMarker) encode() []byte {
	b, _ := json.Marshal(m) // strings only: cannot fail
	return append([]byte{formatVary}, b...)
}

var errBadStored = errors.New("corralhttp: a stored value is not a response")

// value is a decoded stored value: one of its fields is set.
type value struct {
	s    *stored     // a response
	pass bool        // a pass marker
	vary *varyMarker // a vary marker
}

// decode reads a stored value. A response's body shares v's memory.
func decode(v []byte) (value, error) {
	switch {
	case len(v) == 1 && v[0] == formatPass:
		return value{pass: true}, nil
	case len(v) > 1 && v[0] == formatVary:
		m := new(varyMarker)
		if err := json.Unmarshal(v[1:], m); err != nil {
			return value{}, fmt.Errorf("%w: %v", errBadStored, err)
		}
		return value{vary: m}, nil
	case len(v) < 5 || v[0] != formatResponse:
		return value{}, errBadStored
	}
	n := binary.BigEndian.Uint32(v[1:5])
	if uint64(n) > uint64(len(v)-5) {
		return value{}, errBadStored
	}
	s := new(stored)
	if err := json.Unmarshal(v[5:5+n], &s.meta); err != nil {
		return value{}, fmt.Errorf("%w: %v", errBadStored, err)
	}
	s.body = v[5+n:]
	return value{s: s}, nil
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

// servableOnError reports whether the response may be served stale at now
// because the origin failed: inside its stale-if-error window, or its
// stale-while-revalidate one (RFC 5861 sections 3 and 4).
func (s *stored) servableOnError(now time.Time) bool {
	return now.Before(time.UnixMilli(s.Received + s.Fresh + max(s.Stale, s.StaleIfError)))
}

// validators returns the response's ETag and Last-Modified, for a
// conditional request.
func (s *stored) validators() (etag, lastModified string) {
	return s.Header.Get("ETag"), s.Header.Get("Last-Modified")
}
