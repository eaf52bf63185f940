package corralhttp

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The cache key. A shared cache is poisoned when something that changes
// the origin's response is not in the key: one client's header then picks
// the response every other client gets. So the key is built from
// everything the origin is sent: the method (HEAD shares GET's key, and is
// loaded with GET), the origin's scheme and host (the Host header sent),
// the path and query, and every request header that is forwarded, name and
// values. A header not in Options.ForwardHeaders is not sent to the
// origin, so it cannot change the response (X-Forwarded-Host, the classic
// vector, included), unless a response's Vary names it: then it is sent
// for that URL's variants, and is in their keys (vary.go).
//
// Authorization is the one header sent whose value is not keyed: RFC 9111
// section 3.5 says when a stored response may answer a request that
// carries it, and the Handler applies that rule instead. Whether a request
// carries it is keyed, so that such requests, whatever their credentials
// (made-up ones too), never touch the anonymous requests' entries.

// request is what the Handler sends the origin for a GET or HEAD, and the
// names it is stored under.
type request struct {
	url    string      // the origin URL: scheme, host, path and query
	path   string      // the request's path, for logs (url may hold credentials, the query tokens)
	header http.Header // the headers forwarded (and Authorization)
	auth   bool        // the request carries Authorization
	key    string      // the corral key of its response
	vkey   string      // the corral key of its second copy (for revalidation, stale-if-error)
	vary   []string    // for a variant: the Vary'd headers its key holds, beyond the URL's
	proto  string      // the protocol version of the client's request, for Via (not keyed)
	query  string      // the request's query, as sent: with path, its URL tags (tags.go)
	// noStore: the request says no-store (RFC 9111 section 5.2.1.5), so
	// nothing its load fetches is stored.
	noStore bool
}

// outgoing builds what r becomes at the origin, and its keys.
func (h *Handler) outgoing(r *http.Request) request {
	u := h.target(r.URL)
	var b strings.Builder
	b.WriteString("GET\n")
	b.WriteString(u)
	out := make(http.Header, len(h.forward)+1)
	for _, name := range h.forward {
		vs := r.Header.Values(name)
		if len(vs) == 0 {
			continue
		}
		out[name] = slices.Clone(vs)
		b.WriteString("\n")
		b.WriteString(name)
		for _, v := range vs {
			b.WriteString("\x00")
			b.WriteString(v)
		}
	}
	req := request{url: u, path: r.URL.Path, header: out, noStore: hasToken(r.Header.Values("Cache-Control"), "no-store"),
		proto: protoVersion(r.ProtoMajor, r.ProtoMinor), query: r.URL.RawQuery}
	if a := r.Header.Values("Authorization"); len(a) > 0 {
		out["Authorization"] = slices.Clone(a)
		req.auth = true
		b.WriteString("\nAuthorization")
	}
	req.key, req.vkey = keysOf(b.String())
	return req
}

// keysOf returns the corral keys of a response, and of its second copy,
// for what identifies it.
func keysOf(what string) (key, vkey string) {
	sum := sha256.Sum256([]byte(what))
	id := base64.RawURLEncoding.EncodeToString(sum[:])
	return "http:" + id, "http-v:" + id
}

// target is the origin URL for a request URL: the origin's scheme and
// host, its base path joined with the request's path, and the query.
func (h *Handler) target(in *url.URL) string {
	u := *h.origin
	u.Path, u.RawPath = joinPath(h.origin, in)
	u.RawQuery = in.RawQuery
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// joinPath joins the origin's base path and the request's, keeping the
// request's escaping.
func joinPath(base, in *url.URL) (path, rawPath string) {
	if base.Path == "" || base.Path == "/" {
		return in.Path, in.RawPath
	}
	bp := strings.TrimSuffix(base.Path, "/")
	if in.RawPath == "" {
		return bp + in.Path, ""
	}
	return bp + in.Path, strings.TrimSuffix(base.EscapedPath(), "/") + in.RawPath
}

// forwardList returns the canonical, sorted, distinct names of the
// headers to forward, without the ones a proxy never forwards or the
// Handler sets itself.
func forwardList(names []string) []string {
	var out []string
	for _, n := range names {
		n = http.CanonicalHeaderKey(strings.TrimSpace(n))
		if n == "" || hopByHop[n] || n == "Authorization" || n == "Host" || conditional[n] {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// hopByHop lists the headers of one connection, never stored or forwarded
// (RFC 9110 section 7.6.1).
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// conditional lists the request headers that make a request conditional:
// the Handler sends its own, for revalidation, and answers the client's.
var conditional = map[string]bool{
	"If-None-Match": true, "If-Modified-Since": true, "If-Match": true, "If-Unmodified-Since": true, "If-Range": true, "Range": true,
}
