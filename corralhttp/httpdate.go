package corralhttp

import (
	"net/http"
	"strings"
	"time"
)

// Dates, ages and delta-seconds, parsed as RFC 9110 and RFC 9111 define
// them and no more leniently. net/http's ParseTime accepts what the RFCs
// reject (runs of spaces, a one-digit hour...), and an Expires this cache
// cannot parse means the response has already expired (RFC 9111 section
// 5.3): a lenient parser would serve as fresh what the origin's own format
// says nothing about.

// maxDelta is the largest delta-seconds this cache counts: a larger one,
// or one that overflows, is taken as 2^31 seconds (RFC 9111 section 1.2.2).
const maxDelta = 1 << 31

// deltaSeconds parses a delta-seconds (1*DIGIT) as a duration.
func deltaSeconds(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int64(c-'0'), maxDelta)
	}
	return time.Duration(n) * time.Second, true
}

// ageOf is the response's Age (RFC 9111 section 5.1): the first member
// when it is a list (lines included), 0 when that is not a delta-seconds.
func ageOf(h http.Header) time.Duration {
	first, _, _ := strings.Cut(strings.Join(h.Values("Age"), ","), ",")
	age, ok := deltaSeconds(strings.Trim(first, " \t"))
	if !ok {
		return 0
	}
	return age
}

// headerDate returns the date of the singleton field name in h: false when
// it is missing, given more than once, or not an HTTP-date.
func headerDate(h http.Header, name string, now time.Time) (time.Time, bool) {
	vs := h.Values(name)
	if len(vs) != 1 {
		return time.Time{}, false
	}
	return parseHTTPDate(vs[0], now)
}

// parseHTTPDate parses an HTTP-date (RFC 9110 section 5.6.7): an
// IMF-fixdate, or one of the obsolete formats a recipient must accept too
// (rfc850-date, asctime-date), exactly as the grammar has them but for the
// case of the names, which a cache matches case-insensitively (RFC 9111
// section 4.2). A two-digit year more than 50 years after now is the
// latest past year with those digits. Nothing else is a date.
func parseHTTPDate(v string, now time.Time) (time.Time, bool) {
	for _, layout := range []func(*dateScanner) dateParts{imfFixdate, rfc850Date, asctimeDate} {
		d := &dateScanner{s: v, ok: true}
		p := layout(d)
		if !d.ok || d.s != "" {
			continue
		}
		if p.year < 100 {
			p.year += now.Year() / 100 * 100
			if p.year > now.Year()+50 {
				p.year -= 100
			}
		}
		return p.time()
	}
	return time.Time{}, false
}

// dateParts are the numbers of a date, as written.
type dateParts struct{ year, month, day, hour, min, sec int }

// time returns the moment p names, false when there is none (a 31st of
// April, an hour 24...).
func (p dateParts) time() (time.Time, bool) {
	if p.hour > 23 || p.min > 59 || p.sec > 60 {
		return time.Time{}, false
	}
	t := time.Date(p.year, time.Month(p.month), p.day, p.hour, p.min, p.sec, 0, time.UTC)
	if t.Day() != p.day || int(t.Month()) != p.month {
		return time.Time{}, false
	}
	return t, true
}

// imfFixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
func imfFixdate(d *dateScanner) (p dateParts) {
	d.name(shortDays)
	d.lit(", ")
	p.day = d.digits(2)
	d.lit(" ")
	p.month = d.name(months) + 1
	d.lit(" ")
	p.year = d.digits(4)
	d.lit(" ")
	d.timeOfDay(&p)
	d.lit(" GMT")
	return p
}

// rfc850Date: "Sunday, 06-Nov-94 08:49:37 GMT".
func rfc850Date(d *dateScanner) (p dateParts) {
	d.name(longDays)
	d.lit(", ")
	p.day = d.digits(2)
	d.lit("-")
	p.month = d.name(months) + 1
	d.lit("-")
	p.year = d.digits(2)
	d.lit(" ")
	d.timeOfDay(&p)
	d.lit(" GMT")
	return p
}

// asctimeDate: "Sun Nov  6 08:49:37 1994" (the day two digits, or a space
// and one).
func asctimeDate(d *dateScanner) (p dateParts) {
	d.name(shortDays)
	d.lit(" ")
	p.month = d.name(months) + 1
	d.lit(" ")
	if strings.HasPrefix(d.s, " ") {
		d.lit(" ")
		p.day = d.digits(1)
	} else {
		p.day = d.digits(2)
	}
	d.lit(" ")
	d.timeOfDay(&p)
	d.lit(" ")
	p.year = d.digits(4)
	return p
}

var (
	shortDays = []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	longDays  = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	months    = []string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// dateScanner reads a date from the front of s; ok turns false at the
// first thing that is not as expected, and stays so.
type dateScanner struct {
	s  string
	ok bool
}

// lit reads l, case-insensitively.
func (d *dateScanner) lit(l string) {
	if !d.ok || len(d.s) < len(l) || !strings.EqualFold(d.s[:len(l)], l) {
		d.ok = false
		return
	}
	d.s = d.s[len(l):]
}

// digits reads exactly n digits.
func (d *dateScanner) digits(n int) int {
	if !d.ok || len(d.s) < n {
		d.ok = false
		return 0
	}
	v := 0
	for _, c := range []byte(d.s[:n]) {
		if c < '0' || c > '9' {
			d.ok = false
			return 0
		}
		v = v*10 + int(c-'0')
	}
	d.s = d.s[n:]
	return v
}

// name reads one of names, case-insensitively, and returns its index.
func (d *dateScanner) name(names []string) int {
	for i, n := range names {
		if len(d.s) >= len(n) && strings.EqualFold(d.s[:len(n)], n) {
			d.lit(n)
			return i
		}
	}
	d.ok = false
	return 0
}

// timeOfDay reads "HH:MM:SS" into p.
func (d *dateScanner) timeOfDay(p *dateParts) {
	p.hour = d.digits(2)
	d.lit(":")
	p.min = d.digits(2)
	d.lit(":")
	p.sec = d.digits(2)
}
