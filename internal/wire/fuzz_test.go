package wire

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzNames checks the key layout for any key (braces, binary, unicode): the
// three names share the slot tag Redis Cluster will hash, end with the key
// itself, and never collide with another key's names.
func FuzzNames(f *testing.F) {
	for _, k := range []string{"x", "{x}", "x:l", "}x", "{x", "user:{42}:p", "{a}{b}", "x{}y", "ключ", "\x00\xff", "{}", "}{", "a:e:{b}:c"} {
		f.Add(k, k+"'")
	}
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		n := NewNames("corral", k1)
		tag := SlotTag(k1)
		for _, name := range []string{n.Entry, n.Lease, n.Notice} {
			if got, ok := HashTag(name); !ok || got != tag {
				t.Fatalf("name %q hashes by %q (ok %v), want the key's tag %q", name, got, ok, tag)
			}
			if !strings.HasSuffix(name, "}:"+k1) {
				t.Fatalf("name %q does not end with the key %q", name, k1)
			}
		}
		if n.Entry == n.Lease || n.Entry == n.Notice || n.Lease == n.Notice {
			t.Fatalf("names of %q collide: %+v", k1, n)
		}
		if k1 == k2 {
			return
		}
		m := NewNames("corral", k2)
		for _, a := range []string{n.Entry, n.Lease, n.Notice} {
			for _, b := range []string{m.Entry, m.Lease, m.Notice} {
				if a == b {
					t.Fatalf("keys %q and %q share the name %q", k1, k2, a)
				}
			}
		}
	})
}

// FuzzParseNotice checks that any payload on a notice channel decodes to a
// known kind, and a value or failure notice to its payload.
func FuzzParseNotice(f *testing.F) {
	for _, p := range []string{"", "v", "vhello", "n", "c", "d", "edb down", "x", "\x00", "w0:", "w17:3:a bvalue", "w5:9:ab", "wx:0:v", "w-1:0:v", "f1700000000000:17:3:a bvalue", "f0:1:0:v", "fx:1:0:", "f5:", "n1700000000000", "nx"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		n := ParseNotice(payload)
		switch n.Kind {
		case NoticeValue:
			if string(n.Value) != payload[1:] {
				t.Fatalf("value notice %q decoded to %q", payload, n.Value)
			}
		case NoticeFailed:
			if n.Message != payload[1:] {
				t.Fatalf("failure notice %q decoded to %q", payload, n.Message)
			}
		case NoticeBorn:
			// w<born>:<length of the tags>:<tags><value>, as commit.lua
			// writes it: a well-formed one decodes to its parts, and the
			// parts written again decode to the same.
			if n.Born < 0 || !strings.HasSuffix(payload, ":"+n.Tags+string(n.Value)) {
				t.Fatalf("born notice %q decoded to %+v", payload, n)
			}
			// f<soft>:, then the same, for a notice that says its soft
			// expiry.
			prefix := "w"
			if n.Soft != 0 {
				prefix = fmt.Sprintf("f%d:", n.Soft)
			}
			if (n.Soft != 0) != (payload[0] == 'f') || n.Soft < 0 {
				t.Fatalf("notice %q decoded to soft expiry %d", payload, n.Soft)
			}
			again := ParseNotice(fmt.Sprintf("%s%d:%d:%s%s", prefix, n.Born, len(n.Tags), n.Tags, n.Value))
			if again.Kind != NoticeBorn || again.Born != n.Born || again.Tags != n.Tags || string(again.Value) != string(n.Value) || again.Soft != n.Soft {
				t.Fatalf("born notice %q decoded to %+v, written again to %+v", payload, n, again)
			}
		case NoticeNotFound:
			if n.Soft < 0 {
				t.Fatalf("not-found notice %q decoded to soft expiry %d", payload, n.Soft)
			}
		case NoticeCommitted, NoticeRecheck, NoticeTooLarge:
		default:
			t.Fatalf("payload %q decoded to unknown kind %q", payload, n.Kind)
		}
	})
}

// FuzzParseFetch checks the decoding of fetch.lua's replies and of entry
// flags: well-formed replies decode to what they say, anything else is an
// error, never a panic.
func FuzzParseFetch(f *testing.F) {
	f.Add("HIT", "v", "", int64(0), int64(1700000000000))
	f.Add("STALE", "", "nx", int64(1), int64(1))
	f.Add("LOAD", "", "", int64(0), int64(5))
	f.Add("WAIT", "", "", int64(250), int64(5))
	f.Add("WAIT", "s0123", "", int64(250), int64(5))
	f.Add("REFUSED", "", "", int64(-1), int64(5))
	f.Add("REFUSED", "", "", int64(-2), int64(5))
	f.Add("STALE", "v", "", int64(-1), int64(5))
	f.Add("WAT", "\xff", "e", int64(-1), int64(-1))
	f.Fuzz(func(t *testing.T, kind, v, flags string, n, now int64) {
		for _, reply := range []any{
			[]any{kind, v, flags, n, now, now + n},
			[]any{kind, n, flags, n, now, now + n}, // a large payload: its size
			[]any{kind, n, now, v},                 // WAIT: pttl, now, the holder's token
			[]any{kind, now, n},                    // REFUSED: now, why
			[]any{kind, now},
			[]any{kind},
			[]any{},
			kind,
			nil,
		} {
			r, err := ParseFetch(reply)
			if err != nil {
				continue
			}
			switch r.Kind {
			case Hit, Stale:
				if r.Payload == nil {
					if int64(r.Size) != n || r.Flags != ParseFlags(flags) || r.Refresh != (n == 1) {
						t.Fatalf("%#v decoded to %+v", reply, r)
					}
					break
				}
				if string(r.Payload) != v || r.Flags != ParseFlags(flags) || r.Refresh != (n == 1) || r.Refused != (n < 0) {
					t.Fatalf("%#v decoded to %+v", reply, r)
				}
			case Wait:
				if r.PTTL.Milliseconds() != n || r.Holder != Announces(v) {
					t.Fatalf("%#v decoded to %+v", reply, r)
				}
			case Refused:
				if !r.Refused || r.RefusedBy != refusal(n) {
					t.Fatalf("%#v decoded to %+v", reply, r)
				}
			case Load, Newer:
			default:
				t.Fatalf("%#v decoded to unknown kind %d", reply, r.Kind)
			}
			if r.Now != now {
				t.Fatalf("%#v decoded now %d", reply, r.Now)
			}
		}
	})
}

// FuzzEntryName checks the hit path's short-cut against NewNames.
func FuzzEntryName(f *testing.F) {
	for _, k := range []string{"x", "{x}", "user:{42}:p", "\x00\xff", "{}"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if got, want := EntryName("corral", k), NewNames("corral", k).Entry; got != want {
			t.Fatalf("EntryName(%q) = %q, want %q", k, got, want)
		}
	})
}
