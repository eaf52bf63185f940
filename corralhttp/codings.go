package corralhttp

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
)

// Transfer codings other than chunked. Go's HTTP client reads a response
// whose Transfer-Encoding is chunked alone, and fails any other ("too
// many transfer encodings", "unsupported transfer encoding"): a guard
// against request smuggling, which nginx has too, and which made a valid
// HTTP/1.1 response (RFC 9112 section 6.1: "gzip, chunked", or a coding
// without chunked and a body ending with the connection) a 502. Transfer
// codings are hop-by-hop: a recipient that removes them forwards the
// content as it was before they were applied. So when the Transport
// refuses a response's codings, a GET or HEAD (safe, and without a body)
// is sent again, over a connection of its own that is closed after the
// response, and its body is decoded here: chunked, gzip (x-gzip),
// deflate. The response is then an ordinary one, stored as its headers
// say. A coding this cannot decode (compress, br, one of the origin's own)
// fails the exchange with an error that names it: 502, and a log line
// saying why. The connection serves one exchange, so nothing read on it
// can put another exchange out of step. Requests through a proxy
// (Transport.Proxy) and Transports other than *http.Transport are left
// as they are.

// codingTransport is base, with responses whose codings it refuses
// fetched again and decoded.
type codingTransport struct{ base *http.Transport }

// withCodings returns rt, with the fallback above when it is an
// *http.Transport.
func withCodings(rt http.RoundTripper) http.RoundTripper {
	if t, ok := rt.(*http.Transport); ok {
		return &codingTransport{base: t}
	}
	return rt
}

func (t *codingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err == nil || !refusedCoding(err) || req.Method != http.MethodGet && req.Method != http.MethodHead ||
		req.Body != nil && req.Body != http.NoBody {
		return resp, err
	}
	if t.base.Proxy != nil {
		if u, perr := t.base.Proxy(req); perr != nil || u != nil {
			return nil, err
		}
	}
	return t.again(req)
}

// refusedCoding reports whether err is the Transport's refusal of a
// response's Transfer-Encoding (net/http's error type is unexported).
func refusedCoding(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unsupported transfer encoding") || strings.Contains(msg, "too many transfer encodings")
}

// again sends req over a connection of its own and reads the response,
// its transfer codings removed.
func (t *codingTransport) again(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	conn, err := t.dial(ctx, req)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	cb := &connBody{conn: conn, stop: stop}
	out := req.Clone(ctx)
	out.Close = true // "Connection: close": one exchange
	if err := out.Write(conn); err != nil {
		cb.Close()
		return nil, err
	}
	resp, err := readResponse(bufio.NewReader(conn), req)
	if err != nil {
		cb.Close()
		return nil, err
	}
	cb.Reader = resp.Body
	resp.Body = cb
	return resp, nil
}

// dial connects to req's host, with TLS for https, as base would.
func (t *codingTransport) dial(ctx context.Context, req *http.Request) (net.Conn, error) {
	u := req.URL
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	if u.Scheme == "https" && t.base.DialTLSContext != nil {
		return t.base.DialTLSContext(ctx, "tcp", addr)
	}
	dial := t.base.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil || u.Scheme != "https" {
		return conn, err
	}
	cfg := t.base.TLSClientConfig.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// readResponse reads the response to req from br, its 1xx responses
// skipped (the first exchange forwarded them), its body's transfer codings
// removed.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	tp := textproto.NewReader(br)
	for {
		resp, err := readHead(tp)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Request = req
			return resp, decodeBody(resp, br, req.Method)
		}
	}
}

var errBadHead = errors.New("corralhttp: the origin's response head does not parse")

// readHead reads a status line and header section.
func readHead(tp *textproto.Reader) (*http.Response, error) {
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	proto, status, _ := strings.Cut(line, " ")
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok || len(status) < 3 || (len(status) > 3 && status[3] != ' ') {
		return nil, errBadHead
	}
	code, err := strconv.Atoi(status[:3])
	if err != nil || code < 100 {
		return nil, errBadHead
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	return &http.Response{Status: status, StatusCode: code, Proto: proto, ProtoMajor: major, ProtoMinor: minor,
		Header: http.Header(hdr), ContentLength: -1, Close: true}, nil
}

// decodeBody sets resp.Body to what follows its head on br, its transfer
// codings (RFC 9112 section 6.1) removed, last applied first; a response
// without a body (to HEAD, 204, 304) gets none. Transfer-Encoding
// overrides Content-Length (section 6.3), and both go.
func decodeBody(resp *http.Response, br *bufio.Reader, method string) error {
	var codings []string
	for _, line := range resp.Header.Values("Transfer-Encoding") {
		for _, c := range splitTokens(line) {
			codings = append(codings, strings.ToLower(c))
		}
	}
	resp.Header.Del("Transfer-Encoding")
	resp.Header.Del("Content-Length")
	resp.Body = http.NoBody
	if method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified {
		return nil
	}
	var body io.Reader = br // to the connection's end, unless chunked
	if n := len(codings); n > 0 && codings[n-1] == "chunked" {
		body, codings = httputil.NewChunkedReader(br), codings[:n-1]
	}
	for i := len(codings) - 1; i >= 0; i-- {
		var err error
		if body, err = decoder(codings[i], body); err != nil {
			return err
		}
	}
	resp.Body = io.NopCloser(body)
	return nil
}

// decoder returns r with the transfer coding c removed.
func decoder(c string, r io.Reader) (io.Reader, error) {
	switch c {
	case "gzip", "x-gzip":
		return gzip.NewReader(r)
	case "deflate":
		return zlib.NewReader(r)
	case "chunked":
		return nil, errors.New("corralhttp: the origin's response is chunked other than last, or twice (RFC 9112 section 6.1)")
	}
	return nil, fmt.Errorf("corralhttp: the origin's response has transfer coding %q, which this cache cannot decode", c)
}

// connBody is a response body read from conn, which closing it closes.
type connBody struct {
	io.Reader
	conn net.Conn
	stop func() bool // the context.AfterFunc that closes conn
}

func (b *connBody) Close() error {
	b.stop()
	return b.conn.Close()
}
