package corralhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/corralhq/corral"
)

// statusError is a load's error for an origin's 5xx response that is not
// stored: the requests of the load are answered with it, and a stale
// response the origin allowed for errors is served instead where there is
// one (stale-if-error).
type statusError struct{ s *stored }

func (e *statusError) Error() string {
	return "corralhttp: the origin answered " + strconv.Itoa(e.s.Status)
}

// load fetches req's response from the origin, as corral's loader: the
// Entry's freshness and stale window are the response's own. A response
// that may not be shared goes to st's request only, and a pass marker is
// stored instead.
func (h *Handler) load(ctx context.Context, req request, st *state) (corral.Entry, error) {
	mine := st.loading()
	prev := h.previous(ctx, req)
	s, big, err := h.fetch(ctx, req, prev)
	switch {
	case big != nil:
		if !mine || !st.handOver(big) {
			big.close()
		}
		return h.passEntry(req), nil
	case err != nil:
		return corral.Entry{}, err
	}
	v := h.opts.decide(s.Status, s.Header, req.auth, time.UnixMilli(s.Received))
	s.Fresh, s.Stale, s.Auth = v.fresh.Milliseconds(), v.stale.Milliseconds(), v.auth
	if !v.share {
		h.log.Debug("corral: response not shared", "path", req.path, "why", v.why)
		if s.Status >= 500 {
			return corral.Entry{}, &statusError{s}
		}
		if mine {
			st.mu.Lock()
			st.own = s
			st.mu.Unlock()
		}
		return h.passEntry(req), nil
	}
	b, err := s.encode()
	if err != nil {
		return corral.Entry{}, err
	}
	h.keepForRevalidation(ctx, req, s, v, b)
	if !v.store {
		return corral.Entry{Value: b}, nil // no-cache: for the requests of this load only
	}
	stale := v.stale
	if stale == 0 {
		stale = -1 // none
	}
	return corral.Entry{Value: b, TTL: max(v.fresh, time.Millisecond), StaleTTL: stale}, nil
}

// passEntry is the Entry of a pass marker for req: stored for PassTTL, or
// for a request with Authorization not stored at all (one request's
// credentials never decide for others), so that it only sends the flight's
// other callers to the origin.
func (h *Handler) passEntry(req request) corral.Entry {
	if req.auth {
		return corral.Entry{Value: passMarker}
	}
	return corral.Entry{Value: passMarker, TTL: h.opts.PassTTL, StaleTTL: -1}
}

// previous returns the stored response a load may revalidate: the entry
// being refreshed (stale, inside its window), else the validator copy; nil
// when there is neither or Redis fails or is slow (the load then fetches
// the whole response). It waits at most lookupTimeout, so that a load
// failing open over a silent Redis is not delayed further.
func (h *Handler) previous(ctx context.Context, req request) *stored {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	for _, key := range []string{req.key, req.vkey} {
		if key == req.vkey && h.opts.RevalidateKeep == 0 {
			break
		}
		v, err := h.cache.Get(ctx, key)
		if err != nil {
			continue
		}
		if s, pass, err := decode(v); err == nil && !pass {
			if etag, lm := s.validators(); etag != "" || lm != "" {
				return s
			}
		}
	}
	return nil
}

// keepForRevalidation stores a copy of s (encoded as b) under req's
// validator key when s has validators and would otherwise be gone when it
// next needs revalidating: no-cache, or no stale window.
func (h *Handler) keepForRevalidation(ctx context.Context, req request, s *stored, v verdict, b []byte) {
	if h.opts.RevalidateKeep == 0 || (!v.revalidate && v.stale > 0) {
		return
	}
	if etag, lm := s.validators(); etag == "" && lm == "" {
		return
	}
	ttl := max(v.fresh, 0) + h.opts.RevalidateKeep
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	if err := h.cache.Set(ctx, req.vkey, b, ttl); err != nil {
		h.log.Debug("corral: could not keep a response for revalidation", "path", req.path, errAttr(err))
	}
}

// lookupTimeout bounds the Redis calls a load makes for revalidation
// (reading the response it replaces, keeping a validator copy): they are
// worth a round trip, not a wait.
const lookupTimeout = 500 * time.Millisecond

// big is a response over MaxBodyBytes, being read: its load hands it to
// its own request, which streams it to the client, prefix (what the load
// read of the body) first.
type big struct {
	resp   *http.Response
	prefix []byte
	cancel context.CancelFunc // ends the exchange (OriginTimeout bounds it still)
}

func (b *big) close() {
	b.resp.Body.Close()
	b.cancel()
}

// handOver gives b to st's request, unless the request has its answer
// already; it reports whether it did.
func (st *state) handOver(b *big) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.answered {
		return false
	}
	st.big = b
	return true
}

// fetch sends req to the origin, conditional on prev's validators when
// prev is set, and reads the response: a 304 refreshes prev's headers. A
// response over MaxBodyBytes is returned unread past the limit, as big.
// The exchange is bounded by OriginTimeout, and by the load (ctx) unless
// it is handed over as big.
func (h *Handler) fetch(ctx context.Context, req request, prev *stored) (*stored, *big, error) {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.OriginTimeout)
	detach := context.AfterFunc(ctx, cancel)
	s, b, err := h.exchange(octx, req, prev)
	if b != nil {
		detach()
		b.cancel = cancel
		return nil, b, nil
	}
	cancel()
	return s, nil, err
}

// exchange is fetch's request and response, under ctx.
func (h *Handler) exchange(ctx context.Context, req request, prev *stored) (*stored, *big, error) {
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, req.url, nil)
	if err != nil {
		return nil, nil, errors.New("corralhttp: the origin URL does not parse") // err would quote it
	}
	for k, vs := range req.header {
		out.Header[k] = vs
	}
	if prev != nil {
		etag, lm := prev.validators()
		if etag != "" {
			out.Header.Set("If-None-Match", etag)
		}
		if lm != "" {
			out.Header.Set("If-Modified-Since", lm)
		}
	}
	resp, err := h.client.Do(out)
	if err != nil {
		h.metrics.origin("error")
		return nil, nil, originError("request", err)
	}
	code := strconv.Itoa(resp.StatusCode) // the metric's label, "error" if the body is cut short
	defer func() { h.metrics.origin(code) }()
	received := time.Now()
	if resp.StatusCode == http.StatusNotModified && prev != nil {
		resp.Body.Close()
		return refreshed(prev, resp.Header, received), nil, nil
	}
	if resp.ContentLength > h.opts.MaxBodyBytes {
		return nil, &big{resp: resp}, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, h.opts.MaxBodyBytes+1))
	switch {
	case err != nil:
		resp.Body.Close()
		code = "error"
		return nil, nil, originError("body", err)
	case int64(len(body)) > h.opts.MaxBodyBytes:
		return nil, &big{resp: resp, prefix: body}, nil
	}
	resp.Body.Close()
	s := &stored{body: body}
	s.Status, s.Header, s.Received = resp.StatusCode, storedHeader(resp.Header), received.UnixMilli()
	s.Age = int64(ageOf(resp.Header) / time.Second)
	return s, nil, nil
}

// errOrigin is wrapped by the errors of an exchange with the origin that
// failed: no answer, a connection refused or broken, a body cut short.
var errOrigin = errors.New("corralhttp: the origin failed")

// originError is the error of an exchange that failed in its part (its
// request, or the body), without the URL net/http puts in its errors: it
// may hold credentials, a query's tokens, and the internal origin's name.
func originError(part string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%w (%s): %w", errOrigin, part, err)
}

// refreshed is prev updated by a 304's headers (RFC 9111 section 4.3.4),
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
	return s
}

// storedHeader is h without its hop-by-hop headers (those listed in its
// Connection header too).
func storedHeader(h http.Header) http.Header {
	out := h.Clone()
	for _, c := range h.Values("Connection") {
		for _, name := range splitTokens(c) {
			out.Del(name)
		}
	}
	for k := range hopByHop {
		out.Del(k)
	}
	return out
}
