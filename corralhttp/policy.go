package corralhttp

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pquerna/cachecontrol/cacheobject"
)

// What may be stored, and for how long: RFC 9111 (HTTP Caching) for a
// shared cache, with RFC 5861's stale-while-revalidate and stale-if-error.
// The Cache-Control header is parsed by github.com/pquerna/cachecontrol;
// the decisions are made here.

// verdict is what the policy decided about one origin response.
type verdict struct {
	// store: the response may be kept in Redis, fresh for fresh, and
	// served stale for stale after that (0: not at all).
	store        bool
	fresh, stale time.Duration
	// share: the response may answer requests other than the one it was
	// fetched for. Every stored response may; so may a no-cache one, which
	// is revalidated for every load but may answer the requests that
	// waited for that load.
	share bool
	// revalidate: the response must be validated with the origin before
	// each use (no-cache): it is shared with the requests of its load, not
	// stored.
	revalidate bool
	// auth: the response may answer requests with Authorization.
	auth bool
	// why says why a response is not stored, for the debug log.
	why string
}

// heuristic lists the status codes RFC 9110 section 15.1 calls
// "heuristically cacheable": they may be stored without explicit
// freshness (then for Options.DefaultTTL).
var heuristic = map[int]bool{200: true, 203: true, 204: true, 300: true, 301: true, 308: true, 404: true, 405: true, 410: true, 414: true, 501: true}

// decide applies the storage rules to a response (status, h) to a request
// that carried Authorization or not, received at now.
func (o *Options) decide(status int, h http.Header, auth bool, now time.Time) verdict {
	cc, err := cacheobject.ParseResponseCacheControl(strings.Join(h.Values("Cache-Control"), ", "))
	switch {
	case err != nil:
		return verdict{why: "malformed Cache-Control: " + err.Error()}
	case cc.NoStore:
		return verdict{why: "no-store"}
	case cc.PrivatePresent:
		return verdict{why: "private"}
	case hasToken(h.Values("Vary"), "*"):
		return verdict{why: "Vary: *"}
	case len(h.Values("Set-Cookie")) > 0 && !o.CacheSetCookie:
		return verdict{why: "Set-Cookie"}
	case status == http.StatusPartialContent || status == http.StatusNotModified:
		return verdict{why: "status " + strconv.Itoa(status)}
	case status >= 500 && !o.CacheServerErrors:
		return verdict{why: "server error"}
	}
	mayAuth := cc.Public || cc.SMaxAge >= 0 || cc.MustRevalidate
	if auth && !mayAuth {
		return verdict{why: "request with Authorization, response not public"}
	}
	v := verdict{share: true, auth: mayAuth}
	if cc.NoCachePresent {
		// Validated for every use: shared with the requests of its load,
		// kept only as the validator copy.
		v.revalidate, v.why = true, "no-cache"
		return v
	}
	life, explicit := lifetime(cc, h, now)
	switch {
	case !explicit && (!heuristic[status] || o.DefaultTTL <= 0):
		return verdict{why: "no explicit freshness"}
	case !explicit:
		life = o.DefaultTTL
	}
	v.fresh = life - ageOf(h)
	if !cc.MustRevalidate && !cc.ProxyRevalidate && cc.SMaxAge < 0 {
		v.stale = max(seconds(cc.StaleWhileRevalidate), seconds(cc.StaleIfError))
	}
	if v.fresh <= 0 && v.stale <= 0 {
		v.why = "already stale"
		return v
	}
	v.store = true
	return v
}

// lifetime is the response's freshness lifetime by RFC 9111 section
// 4.2.1: s-maxage, else max-age, else Expires minus Date; explicit is false
// when it has none of them.
func lifetime(cc *cacheobject.ResponseCacheDirectives, h http.Header, now time.Time) (life time.Duration, explicit bool) {
	switch {
	case cc.SMaxAge >= 0:
		return seconds(cc.SMaxAge), true
	case cc.MaxAge >= 0:
		return seconds(cc.MaxAge), true
	case h.Get("Expires") != "":
		exp, err := http.ParseTime(h.Get("Expires"))
		if err != nil {
			return 0, true // an invalid Expires means already expired (section 5.3)
		}
		date, err := http.ParseTime(h.Get("Date"))
		if err != nil {
			date = now
		}
		return exp.Sub(date), true
	}
	return 0, false
}

// ageOf is the response's Age header (RFC 9111 section 5.1), 0 when
// missing or invalid.
func ageOf(h http.Header) time.Duration {
	a, err := strconv.ParseInt(strings.TrimSpace(h.Get("Age")), 10, 64)
	if err != nil || a < 0 {
		return 0
	}
	return seconds(cacheobject.DeltaSeconds(min(a, 1<<31-1)))
}

func seconds(d cacheobject.DeltaSeconds) time.Duration {
	return max(time.Duration(d), 0) * time.Second
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
