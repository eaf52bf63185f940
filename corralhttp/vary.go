package corralhttp

import (
	"crypto/rand"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// Vary (RFC 9111 section 4.1): a shared cache never hands a response to a
// request whose headers named by the response's Vary differ from those of
// the request it was fetched for. The key holds the forwarded headers, so
// a Vary naming only those is met already. A Vary naming others (Foo, say)
// is met by forwarding and keying them too, once the response has said so:
//
//   - The URL's key is loaded with the forwarded headers only, so its
//     response is the variant for requests without Foo: those are served
//     it; a request with Foo goes on to its variant's key, which holds the
//     key, the response's VaryID and the request's values of the Vary'd
//     headers (normalised: lines combined, whitespace around commas
//     dropped), and is loaded, and revalidated, with Foo sent to the
//     origin. A header absent and a header empty are two variants.
//   - A response varying on Foo that may be shared but not stored (no-cache,
//     stale) leaves a vary marker in the URL's key for PassTTL instead, so
//     that every request goes to its variant's key (the one without Foo
//     included) and revalidates there.
//   - A variant whose response names a header its key does not hold is
//     given to its own request only; so is a response to a request with
//     Authorization that varies on Authorization (the key holds whether a
//     request has credentials, not which). Vary: *, a member that is no
//     field name, and headers the cache never forwards (hop-by-hop,
//     conditional, Range) are not stored at all. Host needs nothing: the
//     origin is always sent its own.
//
// An invalidation deletes the URL's response and its copy, and with them
// the VaryID: the next one is new, and no variant stored before is found.

// varyOf returns the names a response's Vary lists, canonical, sorted and
// distinct; star when it cannot be met: "*", a member that is not a field
// name, or a header the cache never forwards.
func varyOf(h http.Header) (names []string, star bool) {
	for _, line := range h.Values("Vary") {
		for _, t := range splitTokens(line) {
			n := http.CanonicalHeaderKey(t)
			if t == "*" || !isToken(t) || hopByHop[n] || conditional[n] {
				return nil, true
			}
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), false
}

// isToken reports whether t is a token, as a field name is.
func isToken(t string) bool {
	for i := 0; i < len(t); i++ {
		if !isTchar(t[i]) {
			return false
		}
	}
	return t != ""
}

// beyondKey returns those of a response's Vary names (varyOf) that its
// key does not hold: neither forwarded, nor Host, nor Authorization (whose
// rule is decide's).
func (h *Handler) beyondKey(names []string) []string {
	var out []string
	for _, n := range names {
		if _, forwarded := slices.BinarySearch(h.forward, n); !forwarded && n != "Host" && n != "Authorization" {
			out = append(out, n)
		}
	}
	return out
}

// variantFor returns the request r becomes for its variant after its
// URL's key answered res: when that is a vary marker, or a response varying
// beyond the key on headers r has.
func (h *Handler) variantFor(r *http.Request, req request, res *result) (request, bool) {
	var se *statusError
	if errors.As(res.err, &se) && req.vary == nil {
		names, star := varyOf(se.s.Header)
		if names = h.beyondKey(names); !star && has(r, names) {
			return variant(r, req, se.s.VaryID, names), true
		}
	}
	if res.err != nil || res.own != nil || res.big != nil || res.derr != nil {
		return req, false
	}
	if m := res.v.vary; m != nil {
		return variant(r, req, m.ID, m.Names), true
	}
	if s := res.v.s; s != nil && s.Header.Get("Vary") != "" {
		names, _ := varyOf(s.Header)
		if names = h.beyondKey(names); has(r, names) {
			return variant(r, req, s.VaryID, names), true
		}
	}
	return req, false
}

// has reports whether r has any of the headers names.
func has(r *http.Request, names []string) bool {
	for _, n := range names {
		if len(r.Header.Values(n)) > 0 {
			return true
		}
	}
	return false
}

// errorFits reports whether se, the 5xx of the load r's request req
// coalesced on (loader: r's own), may answer r (RFC 9111 section 4.1, as
// for a stored response): not with Vary: *, unless r sent it, nor when it
// varies on a header beyond req's key, which the load did not send, and r
// has. It returns the names se's Vary lists beyond the URL's key: a
// request it does not fit is passed with them.
func (h *Handler) errorFits(r *http.Request, req request, se *statusError, loader bool) ([]string, bool) {
	names, star := varyOf(se.s.Header)
	if star {
		return nil, loader
	}
	names = h.beyondKey(names)
	for _, n := range names {
		if !slices.Contains(req.vary, n) && len(r.Header.Values(n)) > 0 {
			return names, false
		}
	}
	return names, true
}

// variant is req, for r's variant of the headers names under id: they are
// sent to the origin too, and keyed by their normalised values.
func variant(r *http.Request, req request, id string, names []string) request {
	var b strings.Builder
	b.WriteString(req.key)
	b.WriteString("\nvary ")
	b.WriteString(id)
	v := req
	v.header = req.header.Clone()
	for _, name := range names {
		b.WriteString("\n")
		b.WriteString(name) // alone when absent
		if vs := r.Header.Values(name); len(vs) > 0 {
			v.header[name] = slices.Clone(vs)
			b.WriteString("=")
			b.WriteString(normalise(vs))
		}
	}
	v.vary = names
	v.key, v.vkey = keysOf(b.String())
	return v
}

// normalise returns the lines of a header as one value: combined, the
// whitespace around their commas and empty members dropped (RFC 9111
// section 4.1).
func normalise(lines []string) string {
	var members []string
	for _, l := range lines {
		for m := range strings.SplitSeq(l, ",") {
			if m = strings.Trim(m, " \t"); m != "" {
				members = append(members, m)
			}
		}
	}
	return strings.Join(members, ",")
}

// covers reports whether a variant keyed on keyed holds every name of
// names.
func covers(keyed, names []string) bool {
	for _, n := range names {
		if !slices.Contains(keyed, n) {
			return false
		}
	}
	return true
}

// newVaryID returns a VaryID for a URL whose variants have none yet.
func newVaryID() string {
	return rand.Text()
}
