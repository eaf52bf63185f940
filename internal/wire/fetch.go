package wire

import (
	"fmt"
	"strconv"
	"time"
)

// Reply is the kind of a fetch.lua reply.
type Reply int

const (
	Hit     Reply = iota // {'HIT',   v, f, refresh, now, s, b, g, us, 0}; v is the payload's size when it is large
	Stale                // {'STALE', v, f, refresh, now, s, b, g, us, h}; likewise; h the hard expiry
	Load                 // {'LOAD',  now, us}
	Wait                 // {'WAIT',  pttl, now, lease, heard}: lease is the holder's token
	Refused              // {'REFUSED', now, why}: no entry, and Redis refuses writes (no lease)
	Newer                // {'NEWER', now, s}: the entry has a newer codec version (soft expiry s): load, leave it
)

// replyWords are the first elements of fetch.lua's replies, by Reply.
var replyWords = [...]string{Hit: "HIT", Stale: "STALE", Load: "LOAD", Wait: "WAIT", Refused: "REFUSED", Newer: "NEWER"}

// replyLens are the lengths of fetch.lua's replies, by Reply.
var replyLens = [...]int{Hit: 10, Stale: 10, Load: 3, Wait: 5, Refused: 3, Newer: 3}

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
	Hard      int64         // Stale: the entry's hard expiry, server ms (0 for a Hit)
	PTTL      time.Duration // Wait: the lease's remaining time
	Holder    byte          // Wait: how the holder announces (Announces of its token)
	Heard     bool          // Wait: the caller's echo channel heard the script (EchoName)
	Now       int64         // the server clock, ms
	Born      int64         // Hit, Stale: FieldBorn (microseconds), 0 when absent
	Tags      string        // Hit, Stale: FieldTags
	Micros    int64         // Hit, Stale, Load: the server clock in microseconds (the b of what a lease granted here writes)
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
		if b, ok := a[6].(string); ok {
			r.Born, _ = strconv.ParseInt(b, 10, 64)
		}
		r.Tags, _ = a[7].(string)
		r.Micros = micros(a[8])
		r.Hard = d.int(9)
	case Load:
		r.Now, r.Micros = d.int(1), micros(a[2])
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
		r.Heard = d.int(4) > 0
	default:
		d.bad = true
	}
	if d.bad {
		return FetchReply{}, fmt.Errorf("unexpected reply %#v", res)
	}
	return r, nil
}

// micros reads a script's clock in microseconds (a string: Lua's numbers
// would lose it as integers past 2^53 only, but its string is exact).
func micros(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
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
