package corralhttp

import (
	"slices"
	"testing"
	"time"
)

// TestParseHTTPDate: RFC 9110 section 5.6.7's three formats, exactly, and
// the two-digit year of rfc850-date read as at most 50 years ahead.
func TestParseHTTPDate(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	nov94 := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time // zero: not a date
	}{
		{"Sun, 06 Nov 1994 08:49:37 GMT", nov94},
		{"Sunday, 06-Nov-94 08:49:37 GMT", nov94},
		{"Sun Nov  6 08:49:37 1994", nov94},
		{"Sun Nov 06 08:49:37 1994", nov94},
		{"sun, 06 nov 1994 08:49:37 gmt", nov94},
		{"Thursday, 18-Aug-50 02:01:18 GMT", time.Date(2050, 8, 18, 2, 1, 18, 0, time.UTC)},
		{"Monday, 01-Mar-77 00:00:00 GMT", time.Date(1977, 3, 1, 0, 0, 0, 0, time.UTC)}, // 2077: over 50 years ahead
		{"Sun, 06 Nov 1994 08:49:37 GMT ", time.Time{}},
		{"Sun, 6 Nov 1994 08:49:37 GMT", time.Time{}},
		{"Sun, 06 Nov 1994 8:49:37 GMT", time.Time{}},
		{"Sun,  06 Nov 1994 08:49:37 GMT", time.Time{}},
		{"Sun, 06 Nov 94 08:49:37 GMT", time.Time{}},
		{"Sun, 06 Nov 1994 08:49:37 +0000", time.Time{}},
		{"Sun, 06 Nov 1994 24:00:00 GMT", time.Time{}},
		{"Sun, 30 Feb 1994 08:49:37 GMT", time.Time{}},
		{"Sun Nov 6 08:49:37 1994", time.Time{}},
		{"1994-11-06T08:49:37Z", time.Time{}},
		{"", time.Time{}},
	} {
		got, ok := parseHTTPDate(tc.in, now)
		if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
			t.Errorf("parseHTTPDate(%q) = %v, %v; want %v", tc.in, got, ok, tc.want)
		}
	}
}

// TestEntityTags: an If-None-Match list, commas inside quotes kept.
func TestEntityTags(t *testing.T) {
	for in, want := range map[string][]string{
		`"a"`:               {`"a"`},
		`"a", W/"b" ,"c,d"`: {`"a"`, `W/"b"`, `"c,d"`},
		`*`:                 {"*"},
		`"a", b`:            nil,
		`"a`:                nil,
		`W/"a""b"`:          nil,
		` , "a",, "b" `:     {`"a"`, `"b"`},
	} {
		if got := entityTags(in); !slices.Equal(got, want) {
			t.Errorf("entityTags(%q) = %q, want %q", in, got, want)
		}
	}
}
