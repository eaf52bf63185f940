package corralhttp

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Answering from a stored response: the client's preconditions (RFC 9110
// section 13, in the order of its section 13.2.2) and Range requests
// (section 14), evaluated by this cache as RFC 9111 section 4.3.2 allows.
//
//   - If-None-Match that matches the stored ETag (weak comparison), or,
//     when the request has no If-None-Match, If-Modified-Since (one valid
//     HTTP-date, parsed strictly) no earlier than the stored Last-Modified
//     (without one, its Date; without that, when it was received): 304.
//   - Range (GET only) of one satisfiable byte range: 206 with that part
//     and Content-Range; of ranges none of which is satisfiable: 416 with
//     Content-Range: bytes */length. Several ranges are answered with the
//     whole response (200), which section 14.2 allows, rather than with a
//     multipart body. An If-Range whose validator does not match (a strong
//     ETag, or the exact Last-Modified when that is strong) gets the whole
//     response too, and so do a Range of another unit or malformed.
//
// Only a stored 200 answers these (RFC 9110 section 13.2.1: preconditions
// apply to a 2xx); it says Accept-Ranges: bytes, which is then true.

// write answers r with s, served as sv at now.
func (h *Handler) write(w http.ResponseWriter, r *http.Request, s *stored, sv served, now time.Time) {
	hdr := w.Header()
	for k, vs := range s.Header {
		hdr[k] = vs
	}
	if sv.label != Miss {
		hdr.Set("Age", strconv.FormatInt(int64(max(s.age(now), 0)/time.Second), 10))
	}
	h.mark(hdr, sv, s.Proto)
	body, status := s.body, s.Status
	if status == http.StatusOK {
		hdr.Set("Accept-Ranges", "bytes")
	}
	switch {
	case notModified(r, s, now):
		hdr.Del("Content-Length")
		w.WriteHeader(http.StatusNotModified)
		return
	case status == http.StatusOK && r.Method == http.MethodGet && ifRange(r, s, now):
		body, status = partial(hdr, r.Header.Values("Range"), body)
	}
	if status != http.StatusNoContent && status != http.StatusNotModified {
		hdr.Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(body) // the client's loss, if it fails
	}
}

// notModified reports whether r's preconditions say that its client holds
// s already, so that it gets 304 Not Modified: see above.
func notModified(r *http.Request, s *stored, now time.Time) bool {
	if s.Status != http.StatusOK {
		return false
	}
	if inm := r.Header.Values("If-None-Match"); len(inm) > 0 {
		etag := s.Header.Get("ETag")
		for _, t := range entityTags(strings.Join(inm, ",")) {
			if t == "*" || etag != "" && weakEqual(t, etag) {
				return true
			}
		}
		return false // If-Modified-Since is not looked at (section 13.1.3)
	}
	ims, ok := headerDate(r.Header, "If-Modified-Since", now)
	if !ok {
		return false
	}
	var modified time.Time
	switch {
	case len(s.Header.Values("Last-Modified")) > 0:
		if modified, ok = headerDate(s.Header, "Last-Modified", now); !ok {
			return false
		}
	default:
		if modified, ok = headerDate(s.Header, "Date", now); !ok {
			modified = time.UnixMilli(s.Received)
		}
	}
	return !modified.After(ims)
}

// partial returns the body and status answering the Range ranges (the
// header's lines) for body, and sets hdr's Content-Range and, for a 416,
// drops the stored response's Content- headers: its body is not sent.
func partial(hdr http.Header, ranges []string, body []byte) ([]byte, int) {
	n := int64(len(body))
	if len(ranges) != 1 || n == 0 {
		return body, http.StatusOK
	}
	first, last, verdict := byteRange(ranges[0], n)
	switch verdict {
	case rangeOne:
		hdr.Set("Content-Range", "bytes "+strconv.FormatInt(first, 10)+"-"+strconv.FormatInt(last, 10)+"/"+strconv.FormatInt(n, 10))
		return body[first : last+1], http.StatusPartialContent
	case rangeNone:
		for k := range hdr {
			if strings.HasPrefix(k, "Content-") {
				delete(hdr, k)
			}
		}
		hdr.Set("Content-Range", "bytes */"+strconv.FormatInt(n, 10))
		return nil, http.StatusRequestedRangeNotSatisfiable
	}
	return body, http.StatusOK
}

// What a Range asks of a body.
const (
	rangeIgnored = iota // another unit, malformed, or several ranges: the whole body
	rangeOne            // one satisfiable range
	rangeNone           // no satisfiable range
)

// byteRange reads a Range value (RFC 9110 section 14.2) for a body of n
// bytes, n > 0: the one range it asks, first and last byte included, or
// why it is answered otherwise.
func byteRange(v string, n int64) (first, last int64, verdict int) {
	unit, set, ok := strings.Cut(v, "=")
	if !ok || !strings.EqualFold(unit, "bytes") {
		return 0, 0, rangeIgnored
	}
	specs, satisfiable := 0, 0
	for spec := range strings.SplitSeq(set, ",") {
		if spec = strings.Trim(spec, " \t"); spec == "" {
			continue // an empty list member (RFC 9110 section 5.6.1)
		}
		specs++
		a, b, ok := strings.Cut(spec, "-")
		if !ok {
			return 0, 0, rangeIgnored
		}
		f, l, ok := rangeSpec(a, b, n)
		switch {
		case !ok:
			return 0, 0, rangeIgnored
		case f >= 0:
			first, last = f, l
			satisfiable++
		}
	}
	switch {
	case specs == 0:
		return 0, 0, rangeIgnored
	case satisfiable == 0:
		return 0, 0, rangeNone
	case specs > 1:
		return 0, 0, rangeIgnored
	}
	return first, last, rangeOne
}

// rangeSpec reads one range-spec, split at its dash (a-b), for a body of
// n bytes: its first and last byte, first -1 when it is not satisfiable;
// false when it is malformed.
func rangeSpec(a, b string, n int64) (first, last int64, ok bool) {
	if a == "" { // a suffix-range: the last b bytes
		k, ok := digits(b)
		if !ok || k == 0 {
			return -1, 0, ok
		}
		return n - min(k, n), n - 1, true
	}
	first, ok = digits(a)
	if !ok {
		return 0, 0, false
	}
	last = n - 1
	if b != "" {
		l, ok := digits(b)
		if !ok || l < first {
			return 0, 0, false // section 14.1.1: a last before the first is invalid
		}
		last = min(l, n-1)
	}
	if first >= n {
		return -1, 0, true
	}
	return first, last, true
}

// digits parses 1*DIGIT; a number past 2^62 counts as 2^62, beyond any
// body.
func digits(v string) (int64, bool) {
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = min(n*10+int64(v[i]-'0'), 1<<62)
	}
	return n, v != ""
}

// ifRange reports whether r's If-Range, if it has one, lets a Range be
// answered with part of s (RFC 9110 section 13.1.5): an entity-tag that is
// strong and s's ETag, or an HTTP-date that is s's Last-Modified, when
// that is a strong validator (section 8.8.2.2: at least 60 seconds before
// s's Date).
func ifRange(r *http.Request, s *stored, now time.Time) bool {
	vs := r.Header.Values("If-Range")
	switch {
	case len(vs) == 0:
		return true
	case len(vs) > 1:
		return false
	}
	v := strings.Trim(vs[0], " \t")
	if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "W/") {
		tags := entityTags(v)
		return len(tags) == 1 && tags[0] == v && !strings.HasPrefix(v, "W/") && v == s.Header.Get("ETag")
	}
	at, ok1 := parseHTTPDate(v, now)
	modified, ok2 := headerDate(s.Header, "Last-Modified", now)
	date, ok3 := headerDate(s.Header, "Date", now)
	return ok1 && ok2 && ok3 && at.Equal(modified) && date.Sub(modified) >= time.Minute
}
