package corralhttp

import (
	"net/http"
	"testing"
	"time"
)

// TestDecide: RFC 9111's storage and freshness rules, and RFC 5861's
// windows (kept apart: stale-while-revalidate, stale-if-error), for one
// response each.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	date := now.Format(http.TimeFormat)
	in10 := now.Add(10 * time.Second).Format(http.TimeFormat)
	for _, tc := range []struct {
		name    string
		status  int
		header  []string // name, value pairs
		auth    bool
		opts    Options
		store   bool
		share   bool
		fresh   time.Duration
		swr     time.Duration
		sie     time.Duration
		mayAuth bool
	}{
		{name: "max-age", status: 200, header: []string{"Cache-Control", "max-age=60"}, store: true, share: true, fresh: time.Minute},
		{name: "s-maxage wins", status: 200, header: []string{"Cache-Control", "max-age=60, s-maxage=5, stale-while-revalidate=30"}, store: true, share: true, fresh: 5 * time.Second, mayAuth: true},
		{name: "age counts", status: 200, header: []string{"Cache-Control", "max-age=60", "Age", "45"}, store: true, share: true, fresh: 15 * time.Second},
		{name: "age past max-age", status: 200, header: []string{"Cache-Control", "max-age=60", "Age", "90"}, share: true, fresh: -30 * time.Second},
		{name: "expires minus date", status: 200, header: []string{"Expires", in10, "Date", date}, store: true, share: true, fresh: 10 * time.Second},
		{name: "invalid expires", status: 200, header: []string{"Expires", "0"}, share: true},
		{name: "swr", status: 200, header: []string{"Cache-Control", "max-age=1, stale-while-revalidate=30"}, store: true, share: true, fresh: time.Second, swr: 30 * time.Second},
		{name: "sie longer", status: 200, header: []string{"Cache-Control", "max-age=1, stale-while-revalidate=30, stale-if-error=600"}, store: true, share: true, fresh: time.Second, swr: 30 * time.Second, sie: 10 * time.Minute},
		{name: "must-revalidate: no window", status: 200, header: []string{"Cache-Control", "max-age=1, stale-while-revalidate=30, must-revalidate"}, store: true, share: true, fresh: time.Second, mayAuth: true},
		{name: "proxy-revalidate: no window", status: 200, header: []string{"Cache-Control", "max-age=1, stale-if-error=30, proxy-revalidate"}, store: true, share: true, fresh: time.Second},
		{name: "no-store", status: 200, header: []string{"Cache-Control", "no-store, max-age=60"}},
		{name: "private", status: 200, header: []string{"Cache-Control", "private, max-age=60"}},
		{name: "no-cache shares, stores not", status: 200, header: []string{"Cache-Control", "no-cache"}, share: true},
		{name: "vary star", status: 200, header: []string{"Cache-Control", "max-age=60", "Vary", "Accept, *"}},
		{name: "vary named", status: 200, header: []string{"Cache-Control", "max-age=60", "Vary", "Accept"}, store: true, share: true, fresh: time.Minute},
		{name: "set-cookie", status: 200, header: []string{"Cache-Control", "max-age=60", "Set-Cookie", "a=b"}},
		{name: "set-cookie allowed", status: 200, header: []string{"Cache-Control", "max-age=60", "Set-Cookie", "a=b"}, opts: Options{CacheSetCookie: true}, store: true, share: true, fresh: time.Minute},
		{name: "5xx", status: 503, header: []string{"Cache-Control", "max-age=60"}},
		{name: "5xx allowed", status: 503, header: []string{"Cache-Control", "max-age=60"}, opts: Options{CacheServerErrors: true}, store: true, share: true, fresh: time.Minute},
		{name: "5xx allowed needs freshness", status: 503, opts: Options{CacheServerErrors: true, DefaultTTL: time.Minute}},
		{name: "206", status: 206, header: []string{"Cache-Control", "max-age=60"}},
		{name: "no freshness", status: 200},
		{name: "default ttl", status: 200, opts: Options{DefaultTTL: time.Minute}, store: true, share: true, fresh: time.Minute},
		{name: "default ttl, 404", status: 404, opts: Options{DefaultTTL: time.Minute}, store: true, share: true, fresh: time.Minute},
		{name: "default ttl, not heuristic", status: 302, opts: Options{DefaultTTL: time.Minute}},
		{name: "302 with max-age", status: 302, header: []string{"Cache-Control", "max-age=60"}, store: true, share: true, fresh: time.Minute},
		{name: "authorization, not public", status: 200, header: []string{"Cache-Control", "max-age=60"}, auth: true},
		{name: "authorization, public", status: 200, header: []string{"Cache-Control", "public, max-age=60"}, auth: true, store: true, share: true, fresh: time.Minute, mayAuth: true},
		{name: "authorization, s-maxage", status: 200, header: []string{"Cache-Control", "s-maxage=60"}, auth: true, store: true, share: true, fresh: time.Minute, mayAuth: true},
		{name: "malformed", status: 200, header: []string{"Cache-Control", `max-age="60`}},
		{name: "max-age not a number", status: 200, header: []string{"Cache-Control", "max-age=soon"}, share: true}, // stale: RFC 9111 section 4.2.1
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i < len(tc.header); i += 2 {
				h.Add(tc.header[i], tc.header[i+1])
			}
			v := tc.opts.decide(tc.status, h, tc.auth, now)
			if v.store != tc.store || v.share != tc.share || v.auth != tc.mayAuth {
				t.Fatalf("store %v share %v auth %v (%s); want %v %v %v", v.store, v.share, v.auth, v.why, tc.store, tc.share, tc.mayAuth)
			}
			if v.share && (v.fresh != tc.fresh || v.swr != tc.swr || v.sie != tc.sie) {
				t.Errorf("fresh %v swr %v sie %v; want %v %v %v", v.fresh, v.swr, v.sie, tc.fresh, tc.swr, tc.sie)
			}
			if !v.store && v.why == "" {
				t.Error("no reason given for not storing")
			}
		})
	}
}
