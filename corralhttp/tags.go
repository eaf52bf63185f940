package corralhttp

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
)

// Tags (corral.Entry.Tags), which a purge drops by (purge.go). An origin
// names what a response is about in Surrogate-Key (members separated by
// spaces, Fastly's convention) or Cache-Tag (by commas, Cloudflare's; spaces
// are taken as separators too): those members, distinct, empty ones
// dropped, are its surrogate keys, kept with the stored response (meta.Tags)
// and put on its entry. The two headers are the origin's word to its
// caches, not to clients: they are removed from every response the Handler
// sends, stored or passed, as a CDN removes them (storedHeader, and the
// pass proxy's ModifyResponse).
//
// Every stored thing of a URL carries the URL's own tags too (URLTag): its
// response under every key (the forwarded headers' values, with and
// without Authorization), its Vary variants, the second copy, its pass and
// vary markers. So a purge of a URL finds all of them, whatever headers
// they were fetched with, without knowing those keys.

// The response headers that name a response's surrogate keys.
const (
	headerSurrogateKey = "Surrogate-Key"
	headerCacheTag     = "Cache-Tag"
)

// urlTagPrefix starts every URL tag. Its space keeps the tag apart from
// every surrogate key: a member of Surrogate-Key or Cache-Tag never holds
// a space (tagsOf splits at them).
const urlTagPrefix = "url "

// tagsOf returns the surrogate keys a response's header h names: the
// members of its Surrogate-Key and Cache-Tag lines, in order, distinct,
// empty ones dropped; nil when there are none.
func tagsOf(h http.Header) []string {
	var tags []string
	add := func(members []string) {
		for _, m := range members {
			if !slices.Contains(tags, m) {
				tags = append(tags, m)
			}
		}
	}
	for _, line := range h.Values(headerSurrogateKey) {
		add(strings.Fields(line))
	}
	for _, line := range h.Values(headerCacheTag) {
		add(strings.FieldsFunc(line, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }))
	}
	return tags
}

// hasTags reports whether h names surrogate keys (a 304's that does
// replaces the stored response's).
func hasTags(h http.Header) bool {
	return len(h.Values(headerSurrogateKey)) > 0 || len(h.Values(headerCacheTag)) > 0
}

// withoutTags removes the surrogate-key headers from h.
func withoutTags(h http.Header) {
	h.Del(headerSurrogateKey)
	h.Del(headerCacheTag)
}

// ErrInvalidURL is wrapped by the error of a URL to purge that is not a
// path (URLTag).
var ErrInvalidURL = errors.New("corralhttp: invalid URL to purge")

// URLTag returns the tag that a purge of target drops (Purge.URLs; `corral
// purge --url`). target is a path, starting with /, with or without a
// query, as clients ask the Handler for it: before Options.Origin's base
// path is put in front, so one tag serves every sidecar whatever its
// origin (sidecars of different origins sharing a Prefix share their URL
// tags too).
//
// Every stored thing of a request for path?query carries URLTag(path)
// and, when the query is not empty, URLTag(path?query). So a target without
// a query drops every query of its path (/products/42 drops
// /products/42?utm_source=x too), and a target with a query that URL alone,
// its query compared as sent (?a=1&b=2 is not ?b=2&a=1). The path is
// compared decoded (%7E is ~, %2F is /), so a target drops every spelling
// of its path. What a tag drops is every variant of the URL: whatever
// headers, Authorization or Vary'd values its requests had.
//
// The tag is "url " and the target in a canonical form: the space in it
// keeps it apart from every surrogate key an origin sends. Errors:
// ErrInvalidURL (wrapped) for a target that is not a path (a full URL, a
// relative path, one that does not parse).
func URLTag(target string) (string, error) {
	if !strings.HasPrefix(target, "/") {
		return "", fmt.Errorf("%w: %q: give the path (and query), starting with /, as clients ask the sidecar for it", ErrInvalidURL, target)
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return "", fmt.Errorf("%w: %q does not parse as a path", ErrInvalidURL, target)
	}
	return urlTag(u.Path, u.RawQuery), nil
}

// urlTag is the URL tag of a request for path (decoded) and rawQuery
// (as sent; "" for none).
func urlTag(path, rawQuery string) string {
	if path == "" {
		path = "/"
	}
	t := urlTagPrefix + (&url.URL{Path: path}).EscapedPath()
	if rawQuery != "" {
		t += "?" + rawQuery
	}
	return t
}

// urlTags returns the URL tags of a request for path (decoded) and
// rawQuery: its path's, and with a query its URL's.
func urlTags(path, rawQuery string) []string {
	tags := []string{urlTag(path, "")}
	if rawQuery != "" {
		tags = append(tags, urlTag(path, rawQuery))
	}
	return tags
}

// tagged returns the tags of an entry of req holding a response with the
// surrogate keys keys: those, and req's URL tags (made when a load
// stores something, not for every request).
func (req request) tagged(keys []string) []string {
	return append(slices.Clip(keys), urlTags(req.path, req.query)...)
}
