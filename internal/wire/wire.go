// Package wire is the Go side of corral's Redis protocol, the mirror of the
// headers of internal/scripts/*.lua: the Redis names of a key (names.go), the fields
// and flags of an entry and the reads that decode them (wire.go), fetch.lua's
// reply (fetch.go), lease tokens and the replies of the scripts that write
// (lease.go), the notices published on a key's channel (notice.go), and
// the scripts' arguments (args.go).
// Every message is built and parsed here, side by side, with one constant
// for each byte or word of the format. Nothing here talks to Redis.
package wire

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// Marker is what a lease holds instead of a token when nobody loads but a
// holder's commit must still be rejected (commit.lua takes a missing lease
// for an evicted one, whose commit stands):
//
//   - a revocation, by Delete or Set (delete.lua), or a hand-back without
//     an entry (release.lua): every caller takes the lease over it at once;
//   - a backoff after a failed refresh (release.lua, Options.ErrorTTL),
//     which comes with the entry flagged x: it holds refreshes off, and a
//     miss takes the lease over it.
//
// One word serves both (fetch.lua tells them apart by the flag) so that the
// previous release, which takes the lease over "backoff" on a miss, takes
// it over a revocation too rather than wait for it.
const Marker = "backoff"

// Entry fields (see commit.lua).
const (
	FieldValue      = "v" // the payload, as loaded
	FieldCompressed = "z" // the payload, S2-compressed (flag 'z'), instead of v
	FieldSoft       = "s" // soft expiry, server ms
	FieldTook       = "d" // the last load's duration, ms, fractional (XFetch)
	FieldFlags      = "f" // the flags (Flags)
	FieldToken      = "t" // the lease token of the commit that wrote it; empty for Set
	FieldCodec      = "c" // the writer's codec version (Options.CodecVersion)
	FieldBorn       = "b" // when its load began (a Set: when it ran), microseconds on the records' node's clock (ClearName)
	FieldTags       = "g" // its tags, parted by a NUL byte; absent for none
)

// PeekFields are the fields a peek reads (HMGET), in the order ParsePeek
// takes them, boxed once: built per call, they would cost an allocation
// each on the hit path.
var PeekFields = [...]any{FieldSoft, FieldTook, FieldFlags, FieldValue, FieldCompressed, FieldCodec, FieldBorn, FieldTags}

// PayloadFields are the fields that hold an entry's payload and say how to
// read it (HMGET), in the order ParsePayload takes them.
var PayloadFields = []string{FieldValue, FieldCompressed, FieldFlags}

// ParsePayload decodes the values of PayloadFields: the payload as stored
// (compressed when f says so) and the flags. ok is false when the entry has
// no payload this release knows.
func ParsePayload(vals []any) (payload string, f Flags, ok bool) {
	fs, _ := vals[2].(string)
	if f = ParseFlags(fs); f.Unknown {
		return "", f, false // a format of another release: no entry here
	}
	field := vals[0]
	if f.Compressed {
		field = vals[1]
	}
	payload, ok = field.(string)
	return payload, f, ok
}

// ReadReply is a decoded read.lua reply.
type ReadReply struct {
	Payload []byte // as stored (compressed when Flags say so); nil when too large to come with the reply
	Size    int    // the payload's size, when Payload is nil
	Flags   Flags
	Born    int64  // FieldBorn; 0 when absent
	Tags    string // FieldTags
	Window  bool   // the entry has a stale window: a soft invalidation leaves it, stale
}

// ParseRead decodes a read.lua reply other than nil (no entry).
func ParseRead(res any) (ReadReply, error) {
	a, _ := res.([]any)
	if len(a) != 5 {
		return ReadReply{}, fmt.Errorf("unexpected reply %#v", res)
	}
	w, _ := a[4].(int64)
	fs, _ := a[1].(string)
	r := ReadReply{Flags: ParseFlags(fs), Window: w == 1}
	b, _ := a[2].(string)
	r.Born, _ = strconv.ParseInt(b, 10, 64)
	r.Tags, _ = a[3].(string)
	switch v := a[0].(type) {
	case string:
		r.Payload = []byte(v)
	case int64:
		r.Size = int(v)
	default:
		return ReadReply{}, fmt.Errorf("unexpected reply %#v", res)
	}
	return r, nil
}

// Peeked is an entry as a peek read it.
type Peeked struct {
	Found   bool   // the entry has a payload this release knows
	Payload string // as stored: compressed when Flags say so
	Flags   Flags
	Soft    int64   // soft expiry, server ms
	Took    float64 // the last load's duration, ms
	Version int     // the codec version it was written with; 0 when absent
	Born    int64   // FieldBorn; 0 when absent
	Tags    string  // FieldTags
}

// PayloadBytes returns p's Payload without copying it: it is a bulk reply
// that go-redis read into a buffer of its own (which nobody else holds) and
// returned as a string, and the bytes go to the Cache's callers, who must
// not modify them (see corral's Fetch). Never nil.
func (p Peeked) PayloadBytes() []byte {
	if len(p.Payload) == 0 {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(p.Payload), len(p.Payload))
}

// ParsePeek decodes a peek's reply: the values of PeekFields, read as
// strings (go-redis's StringSliceCmd: a missing field is ""; a reply of
// strings costs a hit half the allocations of one of interfaces). An entry
// without a soft expiry, or with a flag this release does not know, is not
// Found. Neither is one whose payload is empty where a payload is expected
// (a value, a compressed one): an empty string cannot tell an empty value
// from a missing field, so the caller asks fetch.lua, which can.
func ParsePeek(vals []string) (Peeked, error) {
	if len(vals) != len(PeekFields) {
		return Peeked{}, fmt.Errorf("unexpected reply %q", vals)
	}
	var p Peeked
	var err error
	if p.Soft, err = strconv.ParseInt(vals[0], 10, 64); err != nil {
		return p, nil // no entry (or none this release knows)
	}
	p.Took, _ = strconv.ParseFloat(vals[1], 64)
	if p.Flags = ParseFlags(vals[2]); p.Flags.Unknown {
		return p, nil // a format of another release: no entry here
	}
	p.Version, _ = strconv.Atoi(vals[5])
	p.Born, _ = strconv.ParseInt(vals[6], 10, 64)
	p.Tags = vals[7]
	p.Payload = vals[3]
	if p.Flags.Compressed {
		p.Payload = vals[4]
	}
	p.Found = p.Payload != "" || p.Flags.Kind != Value && !p.Flags.Compressed
	return p, nil
}

// Kind is what an entry caches, from its f field.
type Kind byte

const (
	Value    Kind = iota // f has neither n nor e: a value
	NotFound             // f "n": the loader's ErrNotFound (negative caching)
	Failure              // f "e": a load's failure, its message in v (Options.ErrorTTL)
)

// Entry flags, the letters of an entry's f field.
const (
	flagNotFound      = 'n'
	flagFailure       = 'e'
	flagCompressed    = 'z' // the payload is in field z, S2-compressed
	flagRefreshFailed = 'x' // set by release.lua: the entry's last refresh failed
)

// Flags returns the f field that marks kind, and a compressed payload, as
// commit.lua stores it.
func (k Kind) Flags(compressed bool) string {
	var f []byte
	switch k {
	case NotFound:
		f = append(f, flagNotFound)
	case Failure:
		f = append(f, flagFailure)
	}
	if compressed {
		f = append(f, flagCompressed)
	}
	return string(f)
}

// Flags is what an entry's f field says.
type Flags struct {
	Kind          Kind
	Compressed    bool // the payload is S2-compressed (field z)
	RefreshFailed bool // the entry's last refresh failed
	// Unknown is set when f holds a flag this release does not know: the
	// entry is in a format of a later release, and is no entry here (a
	// miss), never served as a plain value. (The scripts apply the same
	// rule: knownFlags.)
	Unknown bool
}

// KnownFlags are the letters of f this release knows, as a Lua pattern's
// class in the scripts ("[^nezx]" finds any other).
const KnownFlags = "nezx"

// ParseFlags reads an entry's f field.
func ParseFlags(f string) Flags {
	var r Flags
	r.Unknown = strings.IndexFunc(f, func(c rune) bool { return !strings.ContainsRune(KnownFlags, c) }) >= 0
	switch {
	case strings.IndexByte(f, flagNotFound) >= 0:
		r.Kind = NotFound
	case strings.IndexByte(f, flagFailure) >= 0:
		r.Kind = Failure
	}
	r.Compressed = strings.IndexByte(f, flagCompressed) >= 0
	r.RefreshFailed = strings.IndexByte(f, flagRefreshFailed) >= 0
	return r
}
