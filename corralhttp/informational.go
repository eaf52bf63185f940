package corralhttp

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
)

// 1xx responses (RFC 9110 section 15.2): a proxy forwards them, and the
// client of a load gets those of its own load as they arrive (a 103 Early
// Hints lets it fetch what the page links to while the origin prepares
// the page). The requests that waited for another's load get none: the
// 1xx went to the request whose load it was. A request passed to the
// origin gets them from httputil.ReverseProxy, which forwards them too.
// None is sent to an HTTP/1.0 client, which would not expect one (RFC
// 9110 section 15.2).

// earlyTo returns w, to which r's own load forwards its 1xx responses, or
// nil when r's client may not be sent any.
func earlyTo(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if !r.ProtoAtLeast(1, 1) {
		return nil
	}
	return w
}

// forwardEarly returns ctx, with which st's own load forwards the origin's
// 1xx responses to st.early.
func (st *state) forwardEarly(ctx context.Context) context.Context {
	if st.early == nil {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: st.informational})
}

// informational sends the client a 1xx response of its own load, unless
// the request has its answer already: the ResponseWriter is then its
// handler's again. st.mu orders the two: the handler reads nothing of the
// writer until its call has returned, which it records under st.mu.
func (st *state) informational(code int, header textproto.MIMEHeader) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.answered {
		return nil
	}
	hdr := st.early.Header()
	sent := storedHeader(http.Header(header))
	for k, vs := range sent {
		hdr[k] = vs
	}
	st.early.WriteHeader(code)
	for k := range sent {
		delete(hdr, k) // a 1xx's fields are its own, not the final response's
	}
	return nil
}
