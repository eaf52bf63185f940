package corralhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/corralhq/corral"
)

// The values of the X-Cache response header, which say how a response was
// served.
const (
	Hit       = "HIT"       // fresh, from the cache
	Stale     = "STALE"     // stale, from the cache, while one request revalidates it, or because the origin failed
	Miss      = "MISS"      // fetched from the origin for this request
	Coalesced = "COALESCED" // fetched for another request, in this process or another, that this one waited for
	Pass      = "PASS"      // not through the cache: other methods, and responses that may not be shared
)

// state is what one request learns about how it was served: from the
// Observer (its call's outcome) and from its loader, if that ran.
type state struct {
	mu       sync.Mutex
	outcome  corral.EventKind // its call's outcome
	ran      bool             // its loader ran (for this request, not in the background)
	own      *stored          // a response fetched for it that may not be shared
	big      *big             // its response, over MaxBodyBytes, to stream
	answered bool             // its call returned: a load after that is a background refresh
	// What its own load did, for Cache-Status: why it went to the origin
	// (fwdURIMiss, fwdStale), the origin's status when it is not the
	// response's (a 304), and whether the response was stored.
	fwd       string
	fwdStatus int
	stored    bool
	// early receives the 1xx responses of its own load (informational.go);
	// nil when the client may not be sent one.
	early http.ResponseWriter
}

// loading records that the request's loader runs for it, unless the
// request has its answer already (the load is then a refresh in the
// background, which it started). It reports whether it does.
func (st *state) loading() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.answered {
		st.ran = true
	}
	return st.ran
}

type stateKey struct{}

// outcomes is the Observer that tells each request's state its outcome.
type outcomes struct{}

func (outcomes) Observe(ctx context.Context, e corral.Event) {
	if !e.Kind.Outcome() {
		return
	}
	st, ok := ctx.Value(stateKey{}).(*state)
	if !ok {
		return
	}
	st.mu.Lock()
	st.outcome = e.Kind
	st.mu.Unlock()
}

// ServeHTTP answers r: GET and HEAD through the cache, other methods
// passed to the origin.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	label := Pass // what an answer cut short (panic(http.ErrAbortHandler)) was: a pass, or a stream
	if h.opts.AccessLog != nil {
		lw := &logWriter{ResponseWriter: w}
		defer func() { h.logAccess(r, lw, label, time.Since(start)) }()
		w = lw
	}
	label = h.serve(w, r)
	h.metrics.request(label, time.Since(start))
}

// serve answers r and returns its metrics label: its X-Cache value,
// labelError for an answer the Handler made up, or labelGone.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) string {
	switch {
	case len(r.URL.RequestURI()) > h.opts.MaxURLBytes:
		return h.fail(w, http.StatusRequestURITooLong, "corral: request URI over "+strconv.Itoa(h.opts.MaxURLBytes)+" bytes")
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		h.passUnsafe(w, r)
		return Pass
	case r.ContentLength > 0 || len(r.TransferEncoding) > 0:
		return h.fail(w, http.StatusBadRequest, "corral: a "+r.Method+" request may not have a body")
	}
	req := h.outgoing(r)
	early := earlyTo(w, r)
	res := h.call(r.Context(), req, early)
	if vr, ok := h.variantFor(r, req, &res); ok {
		req, res = vr, h.call(r.Context(), vr, early)
		r = r.WithContext(context.WithValue(r.Context(), varyKey{}, vr.vary)) // sent with them if passed
	}
	return h.answer(w, r, req, res)
}

// result is what one fetch of a request's key gave it.
type result struct {
	label string    // the X-Cache value, from the call's outcome
	now   time.Time // when the call returned
	err   error
	own   *stored // a response fetched for this request that may not be shared
	big   *big    // this request's response, over MaxBodyBytes, to stream
	v     value   // the value decoded, when the call returned one
	derr  error   // the value's decoding error
	// What this request's own load did (state's fields of the same
	// names); stored only when the Cache stored it in Redis.
	fwd       string
	fwdStatus int
	stored    bool
}

// call fetches req's key through the Cache; early, if not nil, is sent the
// 1xx responses of the request's own load.
func (h *Handler) call(ctx context.Context, req request, early http.ResponseWriter) result {
	st := &state{early: early}
	ctx = context.WithValue(ctx, stateKey{}, st)
	val, err := h.cache.FetchEntry(ctx, req.key, func(ctx context.Context) (corral.Entry, error) {
		return h.load(ctx, req, st)
	})
	res := result{now: time.Now(), err: err}
	st.mu.Lock()
	st.answered = true
	res.label = st.label()
	res.own, res.big = st.own, st.big
	outcome := st.outcome
	res.fwd, res.fwdStatus, res.stored = st.fwd, st.fwdStatus, st.stored && outcome == corral.EventMiss
	st.mu.Unlock()
	if outcome == corral.EventFailOpen || outcome == corral.EventFailSafe {
		h.failedOpen(req.path)
	}
	if res.big != nil && (res.label != Miss || err != nil) {
		res.big.close() // a refresh's, in the background
		res.big = nil
	}
	if res.label != Miss {
		res.own = nil
	}
	if err == nil && res.own == nil && res.big == nil {
		res.v, res.derr = decode(val)
	}
	return res
}

// answer answers r, for which req's key gave res, and returns its metrics
// label.
func (h *Handler) answer(w http.ResponseWriter, r *http.Request, req request, res result) string {
	switch {
	case res.err != nil:
		return h.failed(w, r, req, res)
	case res.own != nil:
		h.write(w, r, res.own, servedAs(res, Miss), res.now)
		return Miss
	case res.big != nil:
		h.stream(w, r, res.big)
		return Pass
	case res.derr != nil:
		h.log.Warn("corral: a stored response does not decode; passing the request to the origin", "path", req.path, errAttr(res.derr))
		h.pass(w, r)
		return Pass
	case res.v.s == nil, req.auth && !res.v.s.Auth && res.label != Miss:
		h.pass(w, r) // a pass marker, or a response not for requests with Authorization
		return Pass
	}
	s, label := res.v.s, res.label
	if s.OnError || label == Hit && !s.fresh(res.now) {
		label = Stale
	}
	h.write(w, r, s, servedAs(res, label), res.now)
	return label
}

// label is the request's X-Cache value, from what st learnt.
// An entry served from the cache was served so even if a refresh it
// started in the background has begun already.
func (st *state) label() string {
	switch {
	case st.outcome == corral.EventHit, st.outcome == corral.EventNearHit, st.outcome == corral.EventFailSafe:
		return Hit // (a fail-safe answer is from this process's memory)
	case st.outcome == corral.EventStaleHit, st.outcome == corral.EventStaleIfError:
		return Stale
	case st.ran:
		return Miss
	}
	return Coalesced // a flight of another request here, or a load in another process
}

// failed answers a request whose fetch failed (res.err): a Redis fault
// passes it to the origin; the origin's own failures get 502 or 504.
func (h *Handler) failed(w http.ResponseWriter, r *http.Request, req request, res result) string {
	err := res.err
	var se *statusError
	f := faultOf(err)
	switch {
	case errors.As(err, &se):
		if names, fits := h.errorFits(r, req, se, res.label == Miss); !fits {
			h.pass(w, r.WithContext(context.WithValue(r.Context(), varyKey{}, names))) // with the Vary'd headers
			return Pass
		}
		h.write(w, r, se.s, servedAs(res, res.label), time.Now())
		return res.label
	case r.Context().Err() != nil:
		return labelGone // the client left: nobody to answer
	case errors.Is(err, corral.ErrClosed):
		return h.fail(w, http.StatusServiceUnavailable, "corral: shutting down")
	case f != nil:
		return h.passFault(w, r, f)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, corral.ErrLoadTimeout):
		return h.timedOut(w, r)
	case errors.Is(err, corral.ErrRemoteLoad):
		return h.fail(w, http.StatusBadGateway, "corral: the origin failed for the request this one waited for")
	}
	h.log.Warn("corral: the origin failed", "path", r.URL.Path, errAttr(err))
	return h.fail(w, http.StatusBadGateway, msgOriginFailed)
}

// timedOut answers a request whose origin exchange ran past
// OriginTimeout: 504, logged.
func (h *Handler) timedOut(w http.ResponseWriter, r *http.Request) string {
	h.log.Warn("corral: the origin did not answer in time", "path", r.URL.Path, "timeout", h.opts.OriginTimeout)
	return h.fail(w, http.StatusGatewayTimeout, "corral: the origin did not answer within "+h.opts.OriginTimeout.String())
}

// msgOriginFailed is the body of a 502: it names no host or error, which
// are the operator's to see (in the log), not every client's.
const msgOriginFailed = "corral: the origin failed (no answer, a refused or broken connection, or a body cut short)"

// stream answers r with b, the response over MaxBodyBytes its load
// handed over: not stored, streamed as it arrives. A body cut short
// aborts the answer, so the client sees it cut too.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, b *big) {
	defer b.close()
	hdr := w.Header()
	for k, vs := range storedHeader(b.resp.Header) {
		hdr[k] = vs
	}
	h.mark(hdr, served{label: Pass, fwd: fwdURIMiss}, protoVersion(b.resp.ProtoMajor, b.resp.ProtoMinor))
	w.WriteHeader(b.resp.StatusCode)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := w.Write(b.prefix); err != nil {
		return
	}
	if _, err := io.Copy(w, b.resp.Body); err != nil && r.Context().Err() == nil {
		h.log.Warn("corral: a response over MaxBodyBytes was cut short", "path", r.URL.Path, errAttr(err))
		panic(http.ErrAbortHandler)
	}
}

// fail answers with status and a one-line text body.
func (h *Handler) fail(w http.ResponseWriter, status int, msg string) string {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, status)
	return labelError
}
