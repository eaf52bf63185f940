package wire

import (
	"strings"
	"testing"
)

// TestNewToken checks that a token says how its holder announces, and that
// a plain one says nothing.
func TestNewToken(t *testing.T) {
	for _, mark := range []byte{0, AnnounceSharded, AnnouncePlain, AnnounceNone} {
		tok := NewToken(mark)
		if got := Announces(tok); got != mark {
			t.Errorf("Announces(NewToken(%q)) = %q", mark, got)
		}
		want := 32
		if mark != 0 {
			want = 33
		}
		if len(tok) != want || strings.Trim(tok[len(tok)-32:], "0123456789abcdef") != "" {
			t.Errorf("NewToken(%q) = %q: want %d characters, ending in 32 hex digits", mark, tok, want)
		}
	}
	if NewToken(0) == NewToken(0) {
		t.Error("two tokens are equal")
	}
}

// TestParsePeek checks the readings of a peek's HMGET s d f v z c b g,
// read as strings (a missing field is "").
func TestParsePeek(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals []string
		want Peeked
	}{
		{"value", []string{"100", "1.5", "", "x", "", "3", "90", "a\x00b"}, Peeked{Found: true, Payload: "x", Soft: 100, Took: 1.5, Version: 3, Born: 90, Tags: "a\x00b"}},
		{"an earlier release's", []string{"100", "1.5", "", "x", "", "3", "", ""}, Peeked{Found: true, Payload: "x", Soft: 100, Took: 1.5, Version: 3}},
		{"compressed", []string{"100", "0", "z", "x", "zz", "", "1", ""}, Peeked{Found: true, Payload: "zz", Soft: 100, Flags: Flags{Compressed: true}, Born: 1}},
		{"negative", []string{"100", "0", "n", "", "", "", "", ""}, Peeked{Found: true, Soft: 100, Flags: Flags{Kind: NotFound}}},
		{"failure", []string{"100", "0", "e", "origin down", "", "", "", ""}, Peeked{Found: true, Payload: "origin down", Soft: 100, Flags: Flags{Kind: Failure}}},
		{"no entry", []string{"", "", "", "", "", "", "", ""}, Peeked{}},
		{"unknown flag", []string{"100", "0", "q", "x", "", "", "", ""}, Peeked{Soft: 100, Flags: Flags{Unknown: true}}},
		{"compressed without z", []string{"100", "0", "z", "x", "", "", "", ""}, Peeked{Soft: 100, Flags: Flags{Compressed: true}}},
		// An empty value and a value field missing read alike: fetch.lua
		// tells them apart.
		{"empty value", []string{"100", "0", "", "", "", "", "", ""}, Peeked{Soft: 100}},
	} {
		got, err := ParsePeek(tc.vals)
		if err != nil || got != tc.want {
			t.Errorf("%s: ParsePeek = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := ParsePeek([]string{"1"}); err == nil {
		t.Error("ParsePeek of a short reply: no error")
	}
}

// PayloadBytes is the payload's bytes, never nil (an empty payload is an
// empty value, not none).
func TestPayloadBytes(t *testing.T) {
	if b := (Peeked{Payload: "xyz"}).PayloadBytes(); string(b) != "xyz" {
		t.Errorf("PayloadBytes = %q; want xyz", b)
	}
	if b := (Peeked{}).PayloadBytes(); b == nil || len(b) != 0 {
		t.Errorf("PayloadBytes of an empty payload = %#v; want empty, not nil", b)
	}
}

// TestParseWritten checks the replies of commit.lua, release.lua and
// delete.lua.
func TestParseWritten(t *testing.T) {
	for _, tc := range []struct {
		res  any
		want Written
		bad  bool
	}{
		{[]any{int64(1), nil}, Written{Status: 1}, false},
		{[]any{int64(0), "NOPERM no channel"}, Written{NoticeError: "NOPERM no channel"}, false},
		{[]any{int64(CommitRefused), nil, "OOM command not allowed"}, Written{Status: -1, Refusal: "OOM command not allowed"}, false},
		{[]any{"1", nil}, Written{}, true},
		{[]any{int64(1)}, Written{}, true},
		{nil, Written{}, true},
	} {
		got, err := ParseWritten(tc.res)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseWritten(%#v) = %+v, %v; want %+v, error %v", tc.res, got, err, tc.want, tc.bad)
		}
	}
}

// TestParseNoticeBorn checks commit.lua's f notice, an earlier release's w
// (f without the soft expiry) and n notices, and that a malformed
// one reads as "fetch again".
func TestParseNoticeBorn(t *testing.T) {
	n := ParseNotice("w1700:3:a\x00bvalue:with:colons")
	if n.Kind != NoticeBorn || n.Born != 1700 || n.Tags != "a\x00b" || string(n.Value) != "value:with:colons" {
		t.Errorf("ParseNotice = %+v", n)
	}
	if n := ParseNotice("w1700:0:"); n.Kind != NoticeBorn || n.Tags != "" || len(n.Value) != 0 {
		t.Errorf("ParseNotice of an empty untagged value = %+v", n)
	}
	n = ParseNotice("f1733380000123:1700:3:a\x00bvalue:with:colons")
	if n.Kind != NoticeBorn || n.Soft != 1733380000123 || n.Born != 1700 || n.Tags != "a\x00b" || string(n.Value) != "value:with:colons" {
		t.Errorf("ParseNotice of an f notice = %+v", n)
	}
	if n := ParseNotice("n1733380000123"); n.Kind != NoticeNotFound || n.Soft != 1733380000123 {
		t.Errorf("ParseNotice of an n notice with its soft expiry = %+v", n)
	}
	if n := ParseNotice("n"); n.Kind != NoticeNotFound || n.Soft != 0 {
		t.Errorf("ParseNotice of an earlier release's n notice = %+v", n)
	}
	for _, bad := range []string{"w", "w1700", "w1700:", "w1700:9:ab", "w1700:-1:ab", "w1700:x:ab", "f", "f1:", "f0:1700:0:", "fx:1700:0:", "f1:1700:9:ab"} {
		if n := ParseNotice(bad); n.Kind != NoticeRecheck {
			t.Errorf("ParseNotice(%q) = %+v; want NoticeRecheck", bad, n)
		}
	}
}
