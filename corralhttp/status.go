package corralhttp

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"
)

// How a response says it was served. X-Cache (HIT, STALE, MISS,
// COALESCED, PASS) is this package's own, kept for those who read it;
// Cache-Status (RFC 9211) says the same in the standard's terms, as one
// member naming the cache (Options.CacheName) appended to the members the
// origin sent: the list runs from the cache closest to the origin to the
// one closest to the client (RFC 9211 section 2), and this cache is the
// last to handle the response. Via (RFC 9110 section 7.6.3) gets
// "<protocol> <CacheName>" appended too, on every response this cache
// forwards and every request it sends the origin.
//
// Neither goes on the errors the Handler makes up (400, 414, 502, 503,
// 504): RFC 9211 section 2 says an intermediary should not add a member to
// a response it generates, unless it is based on a stored one (a 304, a
// 206, a 416 from the cache do get one).

// served is how a response was served: its X-Cache value, and its
// Cache-Status member's parameters.
type served struct {
	label string // the X-Cache value
	// fwd says why the request went to the origin ("" for a hit):
	// uri-miss (nothing stored for it), stale (what was stored had
	// expired), bypass (passed: not through the cache), method (a method
	// the cache does not answer).
	fwd string
	// fwdStatus is the origin's status when it is not the response's: a
	// 304 that refreshed the stored response, a 5xx that a stale one
	// stands in for. 0 otherwise.
	fwdStatus int
	stored    bool   // the response fetched was stored
	collapsed bool   // the request waited for another's fetch (RFC 9111 section 4)
	detail    string // stale: served stale without asking the origin; origin-error: with no answer from it
}

// Cache-Status parameters of ours (RFC 9211 section 2).
const (
	fwdURIMiss = "uri-miss"
	fwdStale   = "stale"
	fwdBypass  = "bypass"
	fwdMethod  = "method"
)

// member is sv's Cache-Status member, for the cache named name.
func (sv served) member(name string) string {
	var b strings.Builder
	b.WriteString(name)
	if sv.fwd == "" {
		b.WriteString("; hit")
	} else {
		b.WriteString("; fwd=" + sv.fwd)
	}
	if sv.fwdStatus != 0 {
		b.WriteString("; fwd-status=" + strconv.Itoa(sv.fwdStatus))
	}
	if sv.stored {
		b.WriteString("; stored")
	}
	if sv.collapsed {
		b.WriteString("; collapsed")
	}
	if sv.detail != "" {
		b.WriteString("; detail=" + sv.detail)
	}
	return b.String()
}

// servedAs is how a request whose key gave res is served, as label (res's
// own, or STALE for a response found expired).
func servedAs(res result, label string) served {
	sv := served{label: label}
	switch {
	case res.v.s != nil && res.v.s.OnError:
		// The request's load (or the one it waited for) asked the origin,
		// which failed: the stale response stands in (stale-if-error).
		sv.fwd, sv.fwdStatus, sv.collapsed = fwdStale, res.v.s.FailedStatus, res.label == Coalesced
		if sv.fwdStatus == 0 {
			sv.detail = "origin-error"
		}
	case label == Hit:
	case label == Stale:
		sv.detail = "stale"
	case label == Coalesced:
		sv.fwd, sv.collapsed = fwdURIMiss, true
	default:
		sv.fwd, sv.fwdStatus, sv.stored = cmp.Or(res.fwd, fwdURIMiss), res.fwdStatus, res.stored
	}
	return sv
}

// passed is how a request passed to the origin is served: bypass, or for
// a method the cache does not answer, method.
func passed(method string) served {
	if method != http.MethodGet && method != http.MethodHead {
		return served{label: Pass, fwd: fwdMethod}
	}
	return served{label: Pass, fwd: fwdBypass}
}

// mark sets the headers of a response (hdr, the origin's received over
// proto) that say how it was served: X-Cache, and Cache-Status and Via
// appended to the origin's.
func (h *Handler) mark(hdr http.Header, sv served, proto string) {
	hdr.Set("X-Cache", sv.label)
	appendMember(hdr, "Cache-Status", sv.member(h.opts.CacheName))
	appendMember(hdr, "Via", h.via(proto))
}

// via is this cache's Via member for a message received over proto.
func (h *Handler) via(proto string) string {
	return cmp.Or(proto, "1.1") + " " + h.opts.CacheName
}

// appendMember appends member to the list header name of hdr, its lines
// combined into one.
func appendMember(hdr http.Header, name, member string) {
	if vs := hdr.Values(name); len(vs) > 0 {
		member = strings.Join(vs, ", ") + ", " + member
	}
	hdr.Set(name, member)
}

// protoVersion is the received-protocol of Via (RFC 9110 section 7.6.3)
// for HTTP major.minor: "1.1", "1.0", "2", "3"; "" when unknown (a
// request made up, not read: Via then says 1.1).
func protoVersion(major, minor int) string {
	switch {
	case major == 0:
		return ""
	case major >= 2 && minor == 0:
		return strconv.Itoa(major)
	}
	return strconv.Itoa(major) + "." + strconv.Itoa(minor)
}

// isCacheName reports whether name may name this cache in both headers: a
// token (Via's pseudonym) that is also a Structured Fields token (a
// Cache-Status member), so one starting with a letter.
func isCacheName(name string) bool {
	return isToken(name) && (name[0] >= 'a' && name[0] <= 'z' || name[0] >= 'A' && name[0] <= 'Z')
}
