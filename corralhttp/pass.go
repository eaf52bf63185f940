package corralhttp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
)

// Passing a request: methods other than GET and HEAD, and URLs whose
// responses may not be shared, go to the origin as they are, streamed by
// net/http/httputil's ReverseProxy, with the same header rules as a load:
// the forwarded headers, Authorization, (for a request with a body)
// Content-Type, and for a request passed at its variant's key the
// headers the variant is keyed on (vary.go); and, since nothing is stored,
// a GET's Range and If-Range, so that the origin answers them itself.
// Each is sent with Via, and answered with Cache-Status: fwd=bypass, or
// fwd=method for a method other than GET and HEAD, and without the
// origin's surrogate keys (tags.go).

// newProxy returns the Handler's pass-through proxy.
func (h *Handler) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:   h.rewrite,
		Transport: h.client.Transport,
		ModifyResponse: func(resp *http.Response) error {
			h.metrics.origin(strconv.Itoa(resp.StatusCode))
			withoutTags(resp.Header) // the origin's word to its caches (tags.go)
			h.mark(resp.Header, passed(resp.Request.Method), protoVersion(resp.ProtoMajor, resp.ProtoMinor))
			if inv, ok := resp.Request.Context().Value(invalidateKey{}).(request); ok && resp.StatusCode < 400 {
				h.invalidate(resp.Request.Context(), inv)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			h.metrics.origin("error")
			switch {
			case errors.Is(context.Cause(r.Context()), errPassTimeout), isTimeout(err):
				h.timedOut(w, r)
			default:
				h.log.Warn("corral: the origin failed", "path", r.URL.Path, errAttr(originError("request", err)))
				h.fail(w, http.StatusBadGateway, msgOriginFailed)
			}
		},
	}
}

// rewrite makes a passed request's pr.Out: see above.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(h.origin)
	in := pr.In.Header
	out := make(http.Header, len(h.forward)+3)
	names := append([]string{"Authorization", "Content-Type"}, h.forward...)
	if vary, ok := pr.In.Context().Value(varyKey{}).([]string); ok {
		names = append(names, vary...)
	}
	if pr.In.Method == http.MethodGet {
		names = append(names, "Range", "If-Range")
	}
	for _, name := range names {
		if vs := in.Values(name); len(vs) > 0 {
			out[name] = vs
		}
	}
	appendMember(out, "Via", h.via(protoVersion(pr.In.ProtoMajor, pr.In.ProtoMinor)))
	pr.Out.Header = out
}

var errPassTimeout = errors.New("corralhttp: OriginTimeout")

// pass sends r to the origin and streams the answer back, within
// OriginTimeout.
func (h *Handler) pass(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeoutCause(r.Context(), h.opts.OriginTimeout, errPassTimeout)
	defer cancel()
	h.proxy.ServeHTTP(w, r.WithContext(ctx))
}

type invalidateKey struct{}

// varyKey is the context key of the Vary'd headers a request passed at its
// variant's key is sent with.
type varyKey struct{}

// passUnsafe passes a request of another method than GET or HEAD, and
// when the origin's answer is not an error, invalidates the stored
// response of its URL (RFC 9111 section 4.4): the one its forwarded
// headers select, and with it that response's Vary variants (vary.go).
func (h *Handler) passUnsafe(w http.ResponseWriter, r *http.Request) {
	safe := r.Method == http.MethodOptions || r.Method == http.MethodTrace
	if !safe {
		r = r.WithContext(context.WithValue(r.Context(), invalidateKey{}, h.outgoing(r)))
	}
	h.pass(w, r)
}

// invalidate deletes req's stored response and its second copy. A
// Redis fault is logged as the others are, once a minute (corral queues
// the invalidation, and applies it once Redis answers).
func (h *Handler) invalidate(ctx context.Context, req request) {
	for _, key := range []string{req.key, req.vkey} {
		err := h.cache.Delete(ctx, key)
		switch f := faultOf(err); {
		case err == nil:
		case f != nil:
			h.faults.seen(req.path, f)
			h.log.Debug("corral: could not invalidate a stored response", "path", req.path, errAttr(err))
		default:
			h.log.Warn("corral: could not invalidate a stored response", "path", req.path, errAttr(err))
		}
	}
}

// isTimeout reports whether err is a timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// splitTokens splits a comma-separated header value into its trimmed,
// non-empty tokens.
func splitTokens(v string) []string {
	var out []string
	for t := range strings.SplitSeq(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}
