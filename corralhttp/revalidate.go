package corralhttp

import (
	"cmp"
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/corralhq/corral"
)

// Revalidation (RFC 9111 section 4.3), and the second copy. A load asks
// the origin conditionally when the response it replaces has validators,
// and a 304 refreshes that response's headers and freshness, keeping its
// body, only when the 304 is about it: same ETag, or without one the same
// Last-Modified. A second copy of a response, under the key's vkey, keeps
// it past the corral entry's life for two uses: revalidating it once it
// has expired (when it has validators and no stale-while-revalidate
// window, or is no-cache: for RevalidateKeep), and serving it stale while
// the origin fails (for its stale-if-error window, when that is longer
// than its stale-while-revalidate window).

// previous returns the stored response a load may revalidate, or serve
// stale should the origin fail: the entry being refreshed (stale, inside
// its window), else the second copy; nil when there is neither or Redis
// fails or is slow (the load then fetches the whole response). It also
// returns the VaryID found (vary.go). It waits at most lookupTimeout, so
// that a load failing open over a silent Redis is not delayed further.
func (h *Handler) previous(ctx context.Context, req request) (*stored, string) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	var varyID string
	for _, key := range []string{req.key, req.vkey} {
		b, err := h.cache.Get(ctx, key)
		if err != nil {
			continue
		}
		switch v, err := decode(b); {
		case err != nil:
		case v.s != nil:
			return v.s, cmp.Or(varyID, v.s.VaryID)
		case v.vary != nil:
			varyID = v.vary.ID
		}
	}
	return nil, varyID
}

// keepSecondCopy stores a copy of s (encoded as b) under req's vkey when
// it would otherwise be gone when it is next needed: to revalidate it (it
// has validators, and is no-cache or has no stale-while-revalidate
// window), or to serve it stale while the origin fails (a stale-if-error
// window past its stale-while-revalidate one).
func (h *Handler) keepSecondCopy(ctx context.Context, req request, s *stored, v verdict, b []byte) {
	var keep time.Duration
	if etag, lm := s.validators(); (etag != "" || lm != "") && (v.revalidate || v.swr == 0) {
		keep = h.opts.RevalidateKeep
	}
	if v.sie > v.swr {
		keep = max(keep, v.sie)
	}
	if keep == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	// Fresh while the response is, then stale for keep: a soft purge
	// (ExpireTags) leaves it to revalidate, a hard one drops it.
	e := corral.Entry{Value: b, TTL: max(v.fresh, time.Millisecond), StaleTTL: keep, Tags: req.tagged(s.Tags)}
	if err := h.cache.SetEntry(ctx, req.vkey, e); err != nil {
		h.log.Debug("corral: could not keep a second copy of a response", "path", req.path, errAttr(err))
	}
}

// lookupTimeout bounds the Redis calls a load makes for revalidation
// (reading the response it replaces, keeping a second copy): they are
// worth a round trip, not a wait.
const lookupTimeout = 500 * time.Millisecond

// setValidators makes out conditional on s's validators, and reports
// whether s had any.
func setValidators(out http.Header, s *stored) bool {
	etag, lm := s.validators()
	if etag != "" {
		out.Set("If-None-Match", etag)
	}
	if lm != "" {
		out.Set("If-Modified-Since", lm)
	}
	return etag != "" || lm != ""
}

// selects reports whether a 304 with header h is about prev (RFC 9111
// section 4.3.4): its ETag matches prev's (strongly, when it is strong),
// or, without one, its Last-Modified is prev's. A 304 with neither is
// about the one response the request was conditional on.
func selects(h http.Header, prev *stored) bool {
	etag, lm := prev.validators()
	if e := h.Get("ETag"); e != "" {
		return weakEqual(e, etag) && (strings.HasPrefix(e, "W/") || !strings.HasPrefix(etag, "W/"))
	}
	if l := h.Get("Last-Modified"); l != "" {
		return l == lm
	}
	return true
}

// refreshed is prev updated by a 304's headers (RFC 9111 section 3.2),
// received at now.
func refreshed(prev *stored, h http.Header, now time.Time) *stored {
	s := &stored{meta: prev.meta, body: prev.body}
	s.Header = prev.Header.Clone()
	for k, vs := range storedHeader(h) {
		if k != "Content-Length" {
			s.Header[k] = vs
		}
	}
	s.Received, s.Age = now.UnixMilli(), int64(ageOf(h)/time.Second)
	if hasTags(h) {
		s.Tags = tagsOf(h)
	}
	return s
}

// weakEqual reports whether two entity-tags match by the weak comparison
// (RFC 9110 section 8.8.3.2): their opaque tags are the same.
func weakEqual(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "W/") == strings.TrimPrefix(b, "W/")
}

// entityTags returns the entity-tags of an If-None-Match value ("*" is
// one), commas inside a tag's quotes kept; nil when it is malformed.
func entityTags(v string) []string {
	var tags []string
	for v = strings.TrimLeft(v, " \t,"); v != ""; v = strings.TrimLeft(v, " \t,") {
		if v[0] == '*' {
			tags, v = append(tags, "*"), v[1:]
			continue
		}
		weak := strings.HasPrefix(v, "W/")
		rest := strings.TrimPrefix(v, "W/")
		end := strings.IndexByte(rest[min(1, len(rest)):], '"')
		if !strings.HasPrefix(rest, `"`) || end < 0 {
			return nil
		}
		tag := rest[:end+2]
		if weak {
			tag = "W/" + tag
		}
		tags, v = append(tags, tag), rest[end+2:]
		if v != "" && v[0] != ',' && v[0] != ' ' && v[0] != '\t' {
			return nil // something stuck to the tag's closing quote
		}
	}
	return tags
}
