package corralhttp

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What may be stored, and for how long: RFC 9111 (HTTP Caching) for a
// shared cache, with RFC 5861's stale-while-revalidate and stale-if-error
// and RFC 9213's targeted fields. The directives are parsed in
// cachecontrol.go, dates and ages in httpdate.go; the decisions are made
// here.

// verdict is what the policy decided about one origin response.
type verdict struct {
	// store: the response may be kept in Redis, fresh for fresh, then
	// served stale for swr while it is revalidated (stale-while-revalidate),
	// and for sie when its revalidation fails (stale-if-error).
	store           bool
	fresh, swr, sie time.Duration
	// share: the response may answer requests other than the one it was
	// fetched for. Every stored response may; so may a no-cache one, which
	// is revalidated for every load but may answer the requests that
	// waited for that load, and a stale one.
	share bool
	// revalidate: the response must be validated with the origin before
	// each use (no-cache): it is shared with the requests of its load, not
	// stored.
	revalidate bool
	// auth: the response may answer requests with Authorization.
	auth bool
	// errShare: a 5xx not stored (Options.CacheServerErrors off) may answer
	// the other requests of its load, nothing but its status keeping it
	// from being stored: not private, no-store, Set-Cookie, Vary: *, nor
	// fetched with Authorization unless it says it may be shared.
	errShare bool
	// why says why a response is not stored, for the debug log.
	why string
}

// heuristic lists the status codes RFC 9110 section 15.1 calls
// "heuristically cacheable": they may be stored without explicit
// freshness (then for their heuristic freshness, or Options.DefaultTTL).
var heuristic = map[int]bool{200: true, 203: true, 204: true, 300: true, 301: true, 308: true, 404: true, 405: true, 410: true, 414: true, 501: true}

// decide applies the storage rules to a response (status, h) to a request
// that carried Authorization or not, received at now.
func (o *Options) decide(status int, h http.Header, auth bool, now time.Time) verdict {
	cc, err := o.cacheDirectives(h)
	mayAuth := cc.public || cc.sMaxAge >= 0 || cc.mustRevalidate
	if why := o.unshared(status, h, cc, err, auth); why != "" {
		return verdict{why: why, errShare: why == whyServerError && (!auth || mayAuth)}
	}
	if auth && !mayAuth {
		return verdict{why: "request with Authorization, response not public"}
	}
	v := verdict{share: true, auth: mayAuth}
	switch {
	case cc.noCache:
		// Validated for every use: shared with the requests of its load,
		// kept only as the second copy.
		v.revalidate, v.why = true, "no-cache"
		return v
	case cc.badFreshness:
		v.why = "invalid freshness information: stale (RFC 9111 section 4.2.1)"
		return v
	}
	life, explicit := lifetime(cc, h, now)
	if !explicit {
		var ok bool
		if life, ok = o.heuristicLife(status, cc, h, now); !ok {
			return verdict{why: "no explicit freshness"}
		}
	}
	v.fresh = life - ageOf(h)
	if !cc.mustRevalidate && !cc.proxyRevalidate && cc.sMaxAge < 0 {
		v.swr, v.sie = cc.swr, cc.sie
	}
	if v.fresh <= 0 && v.swr <= 0 {
		v.why = "already stale"
		return v
	}
	v.store = true
	return v
}

// whyServerError is unshared's reason for a 5xx, when it has no other.
const whyServerError = "server error"

// unshared returns why a response may go to its own request only, or "".
func (o *Options) unshared(status int, h http.Header, cc directives, err error, auth bool) string {
	vary, star := varyOf(h)
	switch {
	case err != nil:
		return err.Error()
	case cc.noStore:
		return "no-store"
	case cc.private:
		return "private"
	case star:
		return "Vary: * (or a header never forwarded)"
	case auth && slices.Contains(vary, "Authorization"):
		return "Vary: Authorization, on a request with Authorization"
	case len(h.Values("Set-Cookie")) > 0 && !o.CacheSetCookie:
		return "Set-Cookie"
	case status == http.StatusPartialContent || status == http.StatusNotModified:
		return "status " + strconv.Itoa(status)
	case status >= 500 && !o.CacheServerErrors:
		return whyServerError // last: the other reasons come first
	}
	return ""
}

// lifetime is the response's freshness lifetime by RFC 9111 section
// 4.2.1: s-maxage, else max-age, else Expires minus Date; explicit is false
// when it has none of them. An Expires that is invalid, or given twice,
// means already expired (section 5.3); a Date that is, the time the
// response was received (RFC 9110 section 6.6.1). A targeted field's
// directives stand without Expires (RFC 9213 section 2.2).
func lifetime(cc directives, h http.Header, now time.Time) (life time.Duration, explicit bool) {
	switch {
	case cc.sMaxAge >= 0:
		return cc.sMaxAge, true
	case cc.maxAge >= 0:
		return cc.maxAge, true
	case cc.targeted || len(h.Values("Expires")) == 0:
		return 0, false
	}
	exp, ok := headerDate(h, "Expires", now)
	if !ok {
		return 0, true
	}
	date, ok := headerDate(h, "Date", now)
	if !ok {
		date = now
	}
	return exp.Sub(date), true
}

// heuristicLife is the freshness lifetime of a response without explicit
// freshness, received at now, and whether it has one (RFC 9111 section
// 4.2.2): only a heuristically cacheable or public one does (section 3);
// with a valid Last-Modified no later than its Date (or now, without a
// valid Date), a tenth of the time between them, at most HeuristicMaxTTL
// (unless that is 0: off); otherwise DefaultTTL, unless that is 0.
func (o *Options) heuristicLife(status int, cc directives, h http.Header, now time.Time) (time.Duration, bool) {
	if !heuristic[status] && !cc.public {
		return 0, false
	}
	if modified, ok := headerDate(h, "Last-Modified", now); ok && o.HeuristicMaxTTL > 0 {
		date, ok := headerDate(h, "Date", now)
		if !ok {
			date = now
		}
		if since := date.Sub(modified); since >= 0 {
			return min(since/10, o.HeuristicMaxTTL), true
		}
	}
	return o.DefaultTTL, o.DefaultTTL > 0
}

// failing reports whether an origin's status is one of the errors for
// which a stale response may be served instead (RFC 5861 section 4).
func failing(status int) bool {
	switch status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// hasToken reports whether a comma-separated header (all its values) has
// token, compared case-insensitively.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range splitTokens(v) {
			if strings.EqualFold(t, token) {
				return true
			}
		}
	}
	return false
}
