// Package wire is the Go side of corral's Redis protocol, the mirror of the
// headers of scripts/*.lua: the Redis names of a key (names.go), the fields
// and flags of an entry (and the peek that reads them), lease tokens, the
// replies of the scripts and the notices published on a key's channel.
// Every message is built and parsed here, side by side, with one constant
// for each byte or word of the format. Nothing here talks to Redis.
package wire

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
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
)

// PeekFields are the fields a peek reads (HMGET), in the order ParsePeek
// takes them, boxed once: built per call, they would cost an allocation
// each on the hit path.
var PeekFields = []any{FieldSoft, FieldTook, FieldFlags, FieldValue, FieldCompressed, FieldCodec}

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
}

// ParseRead decodes a read.lua reply other than nil (no entry).
func ParseRead(res any) (ReadReply, error) {
	a, _ := res.([]any)
	if len(a) != 2 {
		return ReadReply{}, fmt.Errorf("unexpected reply %#v", res)
	}
	fs, _ := a[1].(string)
	r := ReadReply{Flags: ParseFlags(fs)}
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
}

// ParsePeek decodes a peek's reply (the values of PeekFields, as go-redis
// returns them). An entry without a soft expiry, with a flag this release
// does not know, or without its payload is not Found.
func ParsePeek(res any) (Peeked, error) {
	vals, _ := res.([]any)
	if len(vals) != len(PeekFields) {
		return Peeked{}, fmt.Errorf("unexpected reply %#v", res)
	}
	var p Peeked
	soft, _ := vals[0].(string)
	var err error
	if p.Soft, err = strconv.ParseInt(soft, 10, 64); err != nil {
		return p, nil // no entry (or none this release knows)
	}
	d, _ := vals[1].(string)
	p.Took, _ = strconv.ParseFloat(d, 64)
	f, _ := vals[2].(string)
	if p.Flags = ParseFlags(f); p.Flags.Unknown {
		return p, nil // a format of another release: no entry here
	}
	if c, ok := vals[5].(string); ok {
		p.Version, _ = strconv.Atoi(c)
	}
	payload := vals[3]
	if p.Flags.Compressed {
		payload = vals[4]
	}
	p.Payload, p.Found = payload.(string)
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

// Reply is the kind of a fetch.lua reply.
type Reply int

const (
	Hit     Reply = iota // {'HIT',   v, f, refresh, now, s}; v is the payload's size when it is large
	Stale                // {'STALE', v, f, refresh, now, s}; likewise
	Load                 // {'LOAD',  now}
	Wait                 // {'WAIT',  pttl, now, lease}: lease is the holder's token
	Refused              // {'REFUSED', now, why}: no entry, and Redis refuses writes (no lease)
	Newer                // {'NEWER', now, s}: the entry has a newer codec version (soft expiry s): load, leave it
)

// replyWords are the first elements of fetch.lua's replies, by Reply.
var replyWords = [...]string{Hit: "HIT", Stale: "STALE", Load: "LOAD", Wait: "WAIT", Refused: "REFUSED", Newer: "NEWER"}

// replyLens are the lengths of fetch.lua's replies, by Reply.
var replyLens = [...]int{Hit: 6, Stale: 6, Load: 2, Wait: 4, Refused: 3, Newer: 3}

// FetchReply is a decoded fetch.lua reply.
type FetchReply struct {
	Kind      Reply
	Payload   []byte        // Hit, Stale: the payload, as stored (compressed when Flags say so)
	Size      int           // Hit, Stale: the payload's size when too large to come with the reply (Payload is nil)
	Flags     Flags         // Hit, Stale
	Refresh   bool          // Hit, Stale: this caller took the lease to refresh
	Refused   bool          // Hit, Stale, Refused: Redis refused to write the lease
	RefusedBy string        // with Refused: "OOM" (out of memory) or "READONLY" (a replica)
	Soft      int64         // Hit, Stale, Newer: the entry's soft expiry, server ms (names it)
	PTTL      time.Duration // Wait: the lease's remaining time
	Holder    byte          // Wait: how the holder announces (Announces of its token)
	Now       int64         // the server clock, ms
}

// ParseFetch decodes a fetch.lua reply as go-redis returns it. Anything
// but a well-formed reply is an error.
func ParseFetch(res any) (FetchReply, error) {
	a, _ := res.([]any)
	var r FetchReply
	if len(a) == 0 {
		return r, fmt.Errorf("unexpected reply %#v", res)
	}
	word, _ := a[0].(string)
	r.Kind = -1
	for k, w := range replyWords {
		if w == word && len(a) == replyLens[k] {
			r.Kind = Reply(k)
		}
	}
	d := decoder{a: a}
	switch r.Kind {
	case Hit, Stale:
		if n, ok := a[1].(int64); ok && n >= 0 {
			r.Size = int(n)
		} else {
			r.Payload = []byte(d.str(1))
		}
		r.Flags = ParseFlags(d.str(2))
		refresh := d.int(3)
		r.Refresh, r.Refused, r.RefusedBy = refresh == 1, refresh < 0, refusal(refresh)
		r.Now = d.int(4)
		r.Soft = d.int(5)
	case Load:
		r.Now = d.int(1)
	case Newer:
		r.Now, r.Soft = d.int(1), d.int(2)
	case Refused:
		r.Refused, r.RefusedBy = true, refusal(d.int(2))
		r.Now = d.int(1)
	case Wait:
		r.PTTL = time.Duration(d.int(1)) * time.Millisecond
		r.Now = d.int(2)
		lease, _ := a[3].(string) // false when it expired as the script ran
		r.Holder = Announces(lease)
	default:
		d.bad = true
	}
	if d.bad {
		return FetchReply{}, fmt.Errorf("unexpected reply %#v", res)
	}
	return r, nil
}

// refusal names the refusal a script reports as code: -1 OOM, -2
// READONLY; "" for none.
func refusal(code int64) string {
	switch code {
	case -1:
		return "OOM"
	case -2:
		return "READONLY"
	}
	return ""
}

// decoder reads the elements of a script's reply, remembering whether any
// had the wrong type.
type decoder struct {
	a   []any
	bad bool
}

func (d *decoder) str(i int) string {
	s, ok := d.a[i].(string)
	d.bad = d.bad || !ok
	return s
}

func (d *decoder) int(i int) int64 {
	n, ok := d.a[i].(int64)
	d.bad = d.bad || !ok
	return n
}

// A lease token's first byte says how its holder announces the end of its
// load, so that a waiter that cannot hear that (it listens on the other kind
// of pub/sub, or neither has channel rights) re-checks on its own. Tokens of
// earlier releases are plain hex, and announce as this process would.
const (
	AnnounceSharded byte = 's' // SPUBLISH
	AnnouncePlain   byte = 'p' // PUBLISH
	AnnounceNone    byte = 'n' // the holder may not publish: no notice comes
)

// NewToken returns a new lease token: 16 random bytes in hex, after mark
// (AnnounceSharded, AnnouncePlain or AnnounceNone), or plain hex when mark
// is 0 (the process does not know yet how it announces). Hex digits include
// none of the marks, so Announces tells the two apart.
func NewToken(mark byte) string {
	var b [16]byte
	rand.Read(b[:])
	if mark == 0 {
		return hex.EncodeToString(b[:])
	}
	t := make([]byte, 1+hex.EncodedLen(len(b)))
	t[0] = mark
	hex.Encode(t[1:], b[:])
	return string(t)
}

// Announces returns how the holder of a lease whose token is lease
// announces (AnnounceSharded, AnnouncePlain or AnnounceNone), or 0 when the
// token does not say (an earlier release's, or none was read).
func Announces(lease string) byte {
	if lease == "" {
		return 0
	}
	switch lease[0] {
	case AnnounceSharded, AnnouncePlain, AnnounceNone:
		return lease[0]
	}
	return 0
}

// NoticeKind is the first byte of a notice, which says what happened to the
// key (see commit.lua, release.lua and delete.lua).
type NoticeKind byte

const (
	NoticeValue     NoticeKind = 'v' // committed; the value follows inline
	NoticeNotFound  NoticeKind = 'n' // committed a negative entry
	NoticeCommitted NoticeKind = 'c' // committed; the value was too large to inline: fetch it
	NoticeFailed    NoticeKind = 'e' // the load failed; its message follows
	NoticeRecheck   NoticeKind = 'd' // deleted, revoked, or a lease handed back unused: fetch again
	NoticeTooLarge  NoticeKind = 'l' // loaded, but not stored (over MaxValueBytes, or an Entry's TTL <= 0): load it yourself
)

// Notice is a decoded notice.
type Notice struct {
	Kind    NoticeKind
	Value   []byte // NoticeValue
	Message string // NoticeFailed
}

// ParseNotice decodes a notice. An empty or unknown one reads as
// NoticeRecheck: the safe reading is "fetch again".
func ParseNotice(payload string) Notice {
	if payload == "" {
		return Notice{Kind: NoticeRecheck}
	}
	n := Notice{Kind: NoticeKind(payload[0])}
	switch n.Kind {
	case NoticeValue:
		n.Value = []byte(payload[1:])
	case NoticeFailed:
		n.Message = payload[1:]
	case NoticeNotFound, NoticeCommitted, NoticeRecheck, NoticeTooLarge:
	default:
		n.Kind = NoticeRecheck
	}
	return n
}

// Recheck is the notice that tells waiters to fetch again.
const Recheck = string(NoticeRecheck)

// TooLarge is the notice that the load's value was not stored: too large,
// or an Entry with a TTL <= 0.
const TooLarge = string(NoticeTooLarge)

// MaxMessage bounds the error text a failure notice or a cached failure
// carries, in bytes.
const MaxMessage = 1024

// FailureMessage is err's text as other processes see it: in a failure
// notice or a cached failure, at most MaxMessage bytes.
func FailureMessage(err error) string {
	msg := err.Error()
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage]
	}
	return msg
}

// FailureNotice is the notice that a load failed with err.
func FailureNotice(err error) string { return string(NoticeFailed) + FailureMessage(err) }

// Written is the reply of a script that writes and publishes (commit.lua,
// release.lua, delete.lua): {status, notice error[, refusal]}.
type Written struct {
	Status int64
	// NoticeError is why publishing the notice failed (NOPERM without
	// channel rights), or "": the write stands either way.
	NoticeError string
	// Refusal is Redis's error when it refused to write (commit.lua's
	// CommitRefused), or "".
	Refusal string
}

// ParseWritten decodes the reply of a script that writes and publishes.
func ParseWritten(res any) (Written, error) {
	a, _ := res.([]any)
	if len(a) != 2 && len(a) != 3 {
		return Written{}, fmt.Errorf("unexpected reply %#v", res)
	}
	var w Written
	var ok bool
	if w.Status, ok = a[0].(int64); !ok {
		return Written{}, fmt.Errorf("unexpected reply %#v", res)
	}
	w.NoticeError, _ = a[1].(string)
	if len(a) == 3 {
		w.Refusal, _ = a[2].(string)
	}
	return w, nil
}

// Commit is the status of commit.lua's reply.
type Commit int64

const (
	CommitRejected Commit = 0  // the token no longer holds the lease
	CommitStored   Commit = 1  // stored (now, or by an earlier try, known by field t)
	CommitEvicted  Commit = 2  // stored, although the lease was missing (evicted)
	CommitRefused  Commit = -1 // Redis refuses writes (OOM, READONLY): see Written.Refusal
)

// Renewal is renew.lua's reply.
type Renewal int64

const (
	Renewed      Renewal = 1  // extended
	RenewRetaken Renewal = 2  // extended, after finding the lease missing (evicted)
	RenewLost    Renewal = 0  // the token no longer holds the lease
	RenewLate    Renewal = -1 // reached the server after its deadline: dropped
)
