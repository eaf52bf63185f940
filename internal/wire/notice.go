package wire

import (
	"strconv"
	"strings"
)

// NoticeKind is the first byte of a notice, which says what happened to the
// key (see commit.lua, release.lua and delete.lua).
type NoticeKind byte

const (
	NoticeValue     NoticeKind = 'v' // committed; the value follows inline (an earlier release's)
	NoticeBorn      NoticeKind = 'w' // committed; when its load began, its tags, then the value inline (an earlier release's)
	NoticeFresh     NoticeKind = 'f' // committed; its soft expiry, then as NoticeBorn (ParseNotice reads it as NoticeBorn with Soft)
	NoticeNotFound  NoticeKind = 'n' // committed a negative entry; its soft expiry may follow
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
	Born    int64  // NoticeBorn: FieldBorn
	Tags    string // NoticeBorn: FieldTags
	// Soft is the entry's soft expiry, server ms, for NoticeBorn and
	// NoticeNotFound; 0 when the notice does not say (an earlier release's).
	Soft int64
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
	case NoticeFresh:
		// f<soft>:<born>:<length of the tags>:<tags><value>
		s, rest, ok := strings.Cut(payload[1:], ":")
		soft, err := strconv.ParseInt(s, 10, 64)
		if !ok || err != nil || soft <= 0 {
			return Notice{Kind: NoticeRecheck}
		}
		if n = parseBorn(rest); n.Kind == NoticeBorn {
			n.Soft = soft
		}
	case NoticeBorn:
		n = parseBorn(payload[1:])
	case NoticeFailed:
		n.Message = payload[1:]
	case NoticeNotFound:
		// n, or n<soft>: an earlier release sends no soft expiry, and reads
		// the rest as nothing.
		if soft, err := strconv.ParseInt(payload[1:], 10, 64); err == nil && soft > 0 {
			n.Soft = soft
		}
	case NoticeCommitted, NoticeRecheck, NoticeTooLarge:
	default:
		n.Kind = NoticeRecheck
	}
	return n
}

// parseBorn decodes what follows a NoticeBorn's kind:
// <born>:<length of the tags>:<tags><value>. A malformed one reads as
// NoticeRecheck.
func parseBorn(p string) Notice {
	b, rest, ok1 := strings.Cut(p, ":")
	l, rest, ok2 := strings.Cut(rest, ":")
	size, err1 := strconv.Atoi(l)
	born, err2 := strconv.ParseInt(b, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || size < 0 || size > len(rest) || born < 0 {
		return Notice{Kind: NoticeRecheck}
	}
	return Notice{Kind: NoticeBorn, Born: born, Tags: rest[:size], Value: []byte(rest[size:])}
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
