package corralhttp

import (
	"cmp"
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
// stored, and that nothing but its status keeps from being stored
// (verdict.errShare): the requests of the load it fits (errorFits) are
// answered with it, unless a stale response may be served instead
// (stale-if-error).
type statusError struct{ s *stored }

func (e *statusError) Error() string {
	return "corralhttp: the origin answered " + strconv.Itoa(e.s.Status)
}

// load fetches req's response from the origin, as corral's loader: the
// Entry's freshness and stale-while-revalidate window are the response's
// own. A response that may not be shared goes to st's request only, and a
// pass marker is stored instead. When the origin fails (no answer in time,
// or 500, 502, 503, 504), the response it replaces is served stale if it
// allows that (stale-if-error), to the requests of this load only.
func (h *Handler) load(ctx context.Context, req request, st *state) (corral.Entry, error) {
	mine := st.loading()
	prev, varyID := h.previous(ctx, req)
	if mine {
		ctx = st.forwardEarly(ctx)
	}
	s, big, err := h.fetch(ctx, req, prev)
	switch {
	case big != nil:
		if !mine || !st.handOver(big) {
			big.close()
		}
		return h.passEntry(req), nil
	case err != nil:
		if e, ok := staleOnError(prev, 0); ok {
			return e, nil
		}
		return corral.Entry{}, err
	case failing(s.Status):
		if e, ok := staleOnError(prev, s.Status); ok {
			return e, nil
		}
	}
	if mine {
		st.forwarded(prev != nil, s.revalidated)
	}
	e, err := h.settle(ctx, req, st, s, varyID, mine)
	e.Tags = req.tagged(s.Tags)
	return e, err
}

// forwarded records why st's own load asked the origin (fwdStale: it had
// an expired response to revalidate or replace) and whether a 304
// refreshed that response.
func (st *state) forwarded(hadStale, revalidated bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.fwd = fwdURIMiss
	if hadStale {
		st.fwd = fwdStale
	}
	if revalidated {
		st.fwdStatus = http.StatusNotModified
	}
}

// settle decides what becomes of s, fetched for req: stored, given to the
// requests of its load, or to st's request only (mine: st's request runs
// the load).
func (h *Handler) settle(ctx context.Context, req request, st *state, s *stored, varyID string, mine bool) (corral.Entry, error) {
	v, beyond := h.verdictFor(req, s)
	s.Fresh, s.Stale, s.StaleIfError, s.Auth = v.fresh.Milliseconds(), v.swr.Milliseconds(), v.sie.Milliseconds(), v.auth
	if len(beyond) > 0 {
		s.VaryID = cmp.Or(varyID, newVaryID())
	}
	if !v.share {
		h.log.Debug("corral: response not shared", "path", req.path, "why", v.why)
		if v.errShare {
			return corral.Entry{}, &statusError{s} // to the requests it may answer: errorFits
		}
		if mine {
			st.mu.Lock()
			st.own = s
			st.mu.Unlock()
		}
		if s.Status >= 500 {
			return corral.Entry{Value: passMarker}, nil // a passing failure: its other requests pass, no marker is kept
		}
		return h.passEntry(req), nil
	}
	b, err := s.encode()
	switch {
	case err != nil:
		return corral.Entry{}, err
	case req.noStore:
		return corral.Entry{Value: b}, nil // for the requests of this load only
	}
	h.keepSecondCopy(ctx, req, s, v, b)
	switch {
	case !v.store && len(beyond) > 0:
		m := varyMarker{Names: beyond, ID: s.VaryID}
		return corral.Entry{Value: m.encode(), TTL: h.opts.PassTTL, StaleTTL: -1}, nil
	case !v.store:
		return corral.Entry{Value: b}, nil // no-cache, stale: for the requests of this load only
	}
	e := freshFor(b, v, time.UnixMilli(s.Received))
	if mine && e.TTL > 0 {
		st.mu.Lock()
		st.stored = true
		st.mu.Unlock()
	}
	return e, nil
}

// freshFor is the Entry storing b, the response received at received with
// verdict v, for what is left of its freshness and stale-while-revalidate
// window now that it has been read and kept: not stored when nothing is.
func freshFor(b []byte, v verdict, received time.Time) corral.Entry {
	left := v.fresh - time.Since(received)
	end := left + v.swr // its stale window's end, from now
	switch {
	case end <= time.Millisecond:
		return corral.Entry{Value: b} // expired while it was read: for the requests of this load only
	case left <= 0:
		return corral.Entry{Value: b, TTL: time.Millisecond, StaleTTL: end - time.Millisecond}
	case v.swr == 0:
		return corral.Entry{Value: b, TTL: left, StaleTTL: -1}
	}
	return corral.Entry{Value: b, TTL: left, StaleTTL: v.swr}
}

// verdictFor is the policy's verdict on s, fetched for req, and the names
// s's Vary lists beyond the URL's key (vary.go), for the URL's own key; a
// variant's response that varies on a header its key does not hold may
// not be shared.
func (h *Handler) verdictFor(req request, s *stored) (verdict, []string) {
	v := h.opts.decide(s.Status, s.Header, req.auth, time.UnixMilli(s.Received))
	names, _ := varyOf(s.Header)
	beyond := h.beyondKey(names)
	if req.vary == nil {
		return v, beyond
	}
	if v.share && !covers(req.vary, beyond) {
		v = verdict{why: "Vary names a header its variant's key does not hold"}
	}
	return v, nil
}

// staleOnError returns the Entry serving prev stale, marked OnError, when
// the origin failed (with status, or 0 for no answer) and prev allows it;
// not stored, so that the next request asks the origin again.
func staleOnError(prev *stored, status int) (corral.Entry, bool) {
	if prev == nil || !prev.servableOnError(time.Now()) {
		return corral.Entry{}, false
	}
	s := *prev
	s.OnError, s.FailedStatus = true, status
	b, err := s.encode()
	if err != nil {
		return corral.Entry{}, false
	}
	return corral.Entry{Value: b}, true
}

// passEntry is the Entry of a pass marker for req: stored for PassTTL, or
// for a request with Authorization not stored at all (one request's
// credentials never decide for others), so that it only sends the flight's
// other callers to the origin.
func (h *Handler) passEntry(req request) corral.Entry {
	if req.auth {
		return corral.Entry{Value: passMarker}
	}
	return corral.Entry{Value: passMarker, TTL: h.opts.PassTTL, StaleTTL: -1, Tags: req.tagged(nil)}
}

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
// prev has some, and reads the response: a 304 refreshes prev's headers. A
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

// exchange is fetch's request and response, under ctx. A 304 that is not
// about prev (another ETag: RFC 9111 section 4.3.4) refreshes nothing: the
// response is then fetched whole.
func (h *Handler) exchange(ctx context.Context, req request, prev *stored) (*stored, *big, error) {
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, req.url, nil)
	if err != nil {
		return nil, nil, errors.New("corralhttp: the origin URL does not parse") // err would quote it
	}
	for k, vs := range req.header {
		out.Header[k] = vs
	}
	appendMember(out.Header, "Via", h.via(req.proto))
	conditional := prev != nil && setValidators(out.Header, prev)
	sent := time.Now() // its age counts from here (RFC 9111 section 4.2.3: response_delay)
	resp, err := h.client.Do(out)
	if err != nil {
		h.metrics.origin("error")
		return nil, nil, originError("request", err)
	}
	code := strconv.Itoa(resp.StatusCode) // the metric's label, "error" if the body is cut short
	defer func() { h.metrics.origin(code) }()
	if resp.StatusCode == http.StatusNotModified && conditional {
		resp.Body.Close()
		if !selects(resp.Header, prev) {
			h.log.Debug("corral: a 304 names another response; fetching it whole", "path", req.path)
			return h.exchange(ctx, req, nil)
		}
		s := refreshed(prev, resp.Header, sent)
		s.revalidated = true
		return s, nil, nil
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
	s.Status, s.Header, s.Received, s.Tags = resp.StatusCode, storedHeader(resp.Header), sent.UnixMilli(), tagsOf(resp.Header)
	s.Age = int64(ageOf(resp.Header) / time.Second)
	if p := protoVersion(resp.ProtoMajor, resp.ProtoMinor); p != "1.1" {
		s.Proto = p
	}
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

// storedHeader is h without its hop-by-hop headers (those listed in its
// Connection header too) and its surrogate keys (tags.go): what a client
// is sent of an origin's header.
func storedHeader(h http.Header) http.Header {
	out := h.Clone()
	withoutTags(out)
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
