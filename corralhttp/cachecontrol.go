package corralhttp

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// Cache directives, from a response's Cache-Control (RFC 9111 section 5.2)
// or from a targeted field (RFC 9213): CDN-Cache-Control, and ahead of it
// Options.TargetedCacheControl when set. The first targeted field with a
// valid, non-empty value is followed, and Cache-Control and Expires are
// then ignored; a targeted field is a Structured Fields Dictionary (RFC
// 8941, parsed by github.com/dunglas/httpsfv), and one that does not parse,
// or gives a directive a value of the wrong type, is ignored whole.
//
// Cache-Control is parsed here, strictly: a list of token[=token or
// quoted-string] (RFC 9110 section 5.6). A header that does not parse is
// malformed, and its response not shared (a directive such as private may
// hide in what could not be read). Directive names are matched
// case-insensitively; unknown ones are ignored (RFC 9111 section 5.2.3).
// A max-age or s-maxage that is not a delta-seconds, or is given twice, is
// invalid freshness information: the response is stale (section 4.2.1). A
// stale-while-revalidate or stale-if-error that is invalid or given twice
// gives no window. The qualified forms of private and no-cache (naming
// fields) count as the unqualified ones, which restrict more.

// absent is a max-age or s-maxage that the directives do not give.
const absent = time.Duration(-1)

// directives are the cache directives of one response.
type directives struct {
	noStore, private, noCache, public bool
	mustRevalidate, proxyRevalidate   bool
	maxAge, sMaxAge                   time.Duration // absent, or the lifetime
	swr, sie                          time.Duration // 0: no window
	badFreshness                      bool          // max-age or s-maxage invalid or repeated: stale
	targeted                          bool          // from a targeted field: Expires does not count
}

var errMalformed = errors.New("corralhttp: malformed Cache-Control")

// cacheDirectives returns the directives this cache follows for a
// response with header h.
func (o *Options) cacheDirectives(h http.Header) (directives, error) {
	for _, name := range [2]string{o.TargetedCacheControl, "CDN-Cache-Control"} {
		if name == "" {
			continue
		}
		if d, ok := parseTargeted(h.Values(name)); ok {
			return d, nil
		}
	}
	return parseCacheControl(h.Values("Cache-Control"))
}

// parseCacheControl parses the lines of a Cache-Control header.
func parseCacheControl(lines []string) (directives, error) {
	d := directives{maxAge: absent, sMaxAge: absent}
	seen := make(map[string]bool)
	sc := ccScanner{s: strings.Join(lines, ",")}
	for {
		name, arg, hasArg, err := sc.next()
		switch {
		case err != nil:
			return d, err
		case name == "":
			return d, nil
		}
		d.set(name, arg, hasArg, seen[name])
		seen[name] = true
	}
}

// set records the directive name (lowercase), with its argument if
// hasArg; again says an earlier one had the same name.
func (d *directives) set(name, arg string, hasArg, again bool) {
	switch name {
	case "max-age", "s-maxage":
		n, ok := deltaSeconds(arg)
		switch {
		case !hasArg || !ok || again:
			d.badFreshness = true
		case name == "max-age":
			d.maxAge = n
		default:
			d.sMaxAge = n
		}
	case "stale-while-revalidate", "stale-if-error":
		n, ok := deltaSeconds(arg)
		if !hasArg || !ok || again {
			n = 0
		}
		if name == "stale-if-error" {
			d.sie = n
		} else {
			d.swr = n
		}
	case "public":
		d.public = d.public || !hasArg
	default:
		d.setFlag(name)
	}
}

// setFlag records a directive that restricts caching, with or without an
// argument.
func (d *directives) setFlag(name string) {
	switch name {
	case "no-store":
		d.noStore = true
	case "private":
		d.private = true
	case "no-cache":
		d.noCache = true
	case "must-revalidate":
		d.mustRevalidate = true
	case "proxy-revalidate":
		d.proxyRevalidate = true
	}
}

// ccScanner reads the directives of a Cache-Control value in turn.
type ccScanner struct {
	s string
	i int
}

// next returns the next directive, its name lowercased, or "" at the end.
func (sc *ccScanner) next() (name, arg string, hasArg bool, err error) {
	for sc.i < len(sc.s) && (sc.s[sc.i] == ',' || sc.s[sc.i] == ' ' || sc.s[sc.i] == '\t') {
		sc.i++
	}
	if sc.i == len(sc.s) {
		return "", "", false, nil
	}
	if name = sc.token(); name == "" {
		return "", "", false, errMalformed
	}
	if sc.i < len(sc.s) && sc.s[sc.i] == '=' {
		sc.i++
		hasArg = true
		if sc.i < len(sc.s) && sc.s[sc.i] == '"' {
			arg, err = sc.quoted()
		} else if arg = sc.token(); arg == "" {
			err = errMalformed
		}
	}
	for sc.i < len(sc.s) && (sc.s[sc.i] == ' ' || sc.s[sc.i] == '\t') {
		sc.i++
	}
	if err == nil && sc.i < len(sc.s) && sc.s[sc.i] != ',' {
		err = errMalformed
	}
	return strings.ToLower(name), arg, hasArg, err
}

// token reads a token (RFC 9110 section 5.6.2).
func (sc *ccScanner) token() string {
	start := sc.i
	for sc.i < len(sc.s) && isTchar(sc.s[sc.i]) {
		sc.i++
	}
	return sc.s[start:sc.i]
}

// quoted reads a quoted-string (RFC 9110 section 5.6.4) and returns its
// content, unescaped.
func (sc *ccScanner) quoted() (string, error) {
	var b strings.Builder
	for sc.i++; sc.i < len(sc.s); sc.i++ {
		switch c := sc.s[sc.i]; {
		case c == '"':
			sc.i++
			return b.String(), nil
		case c == '\\' && sc.i+1 < len(sc.s):
			sc.i++
			b.WriteByte(sc.s[sc.i])
		case c == '\t' || c >= ' ' && c != 0x7f:
			b.WriteByte(c)
		default:
			return "", errMalformed
		}
	}
	return "", errMalformed // no closing quote
}

// isTchar reports whether c may be in a token.
func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseTargeted parses the lines of a targeted field; false when it is
// missing, empty or invalid, and so not to be followed.
func parseTargeted(lines []string) (directives, bool) {
	if len(lines) == 0 {
		return directives{}, false
	}
	dict, err := httpsfv.UnmarshalDictionary(lines)
	if err != nil || len(dict.Names()) == 0 {
		return directives{}, false
	}
	d := directives{maxAge: absent, sMaxAge: absent, targeted: true}
	for _, name := range dict.Names() {
		m, _ := dict.Get(name)
		if !d.setTargeted(name, m) {
			return directives{}, false
		}
	}
	return d, true
}

// setTargeted records a targeted field's member; false when its value has
// the wrong type for the directive (RFC 9213 section 2.1).
func (d *directives) setTargeted(name string, m httpsfv.Member) bool {
	var v any
	if item, ok := m.(httpsfv.Item); ok {
		v = item.Value
	}
	on, isBool := v.(bool)
	switch name {
	case "max-age", "s-maxage", "stale-while-revalidate", "stale-if-error":
		n, ok := v.(int64)
		if !ok || n < 0 {
			return false
		}
		*map[string]*time.Duration{"max-age": &d.maxAge, "s-maxage": &d.sMaxAge,
			"stale-while-revalidate": &d.swr, "stale-if-error": &d.sie}[name] = time.Duration(min(n, maxDelta)) * time.Second
		return true
	case "public", "no-store", "must-revalidate", "proxy-revalidate":
		if !isBool {
			return false
		}
	case "private", "no-cache":
		// The qualified forms (a list of fields) restrict as the plain ones.
		on = on || !isBool
	default:
		return true // an extension: ignored
	}
	if name == "public" {
		d.public = on
	} else if on {
		d.setFlag(name)
	}
	return true
}
