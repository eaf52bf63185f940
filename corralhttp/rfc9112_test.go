package corralhttp_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
)

// RFC 9112 (HTTP/1.1) section 6: transfer codings. A response whose
// Transfer-Encoding Go's client does not read (anything but chunked alone)
// is decoded (gzip, x-gzip, deflate; chunked last, or the body ending with
// the connection) and served, and stored, as the response it codes; one
// whose coding cannot be decoded gets 502, and the log names the coding.

func gzipped(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

func deflated(s string) []byte {
	var b bytes.Buffer
	zw := zlib.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

// rawOrigin starts an origin that answers each request with head (status
// line and header lines, CRLF each) and body, then closes the connection.
func rawOrigin(t *testing.T, head string, body []byte) *origin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &origin{Server: &httptest.Server{URL: "http://" + ln.Addr().String()}}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for line, err := br.ReadString('\n'); line != "\r\n"; line, err = br.ReadString('\n') {
					if err != nil {
						return
					}
				}
				o.requests.Add(1)
				io.WriteString(conn, head+"\r\n")
				conn.Write(body)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return o
}

// TestTransferCodings: RFC 9112 sections 6.1 and 6.3.
func TestTransferCodings(t *testing.T) {
	srv := redistest.Start(t)
	coded := func(te string, body []byte, cc string) func(http.ResponseWriter, *http.Request, int64) {
		return func(w http.ResponseWriter, _ *http.Request, _ int64) {
			w.Header().Set("Transfer-Encoding", te) // net/http adds chunked, last
			w.Header().Set("Cache-Control", cc)
			w.Write(body)
		}
	}
	for _, tc := range []struct {
		name   string
		origin func(t *testing.T) *origin
		status int
		body   string
		stored bool
		logged string // in the log, for a 502
	}{
		{"6.1 gzip, chunked", func(t *testing.T) *origin { return startOrigin(t, coded("gzip", gzipped("hello"), "max-age=60")) },
			200, "hello", true, ""},
		{"6.1 x-gzip, chunked", func(t *testing.T) *origin { return startOrigin(t, coded("x-gzip", gzipped("hello"), "max-age=60")) },
			200, "hello", true, ""},
		{"6.1 deflate, chunked", func(t *testing.T) *origin { return startOrigin(t, coded("Deflate", deflated("hello"), "max-age=60")) },
			200, "hello", true, ""},
		{"6.1 gzip, chunked, private: passed", func(t *testing.T) *origin { return startOrigin(t, coded("gzip", gzipped("hello"), "private")) },
			200, "hello", false, ""},
		{"6.3 gzip, to the connection's end", func(t *testing.T) *origin {
			return rawOrigin(t, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n", gzipped("hello"))
		}, 200, "hello", true, ""},
		{"6.1 a coding not known", func(t *testing.T) *origin { return startOrigin(t, coded("foo", []byte("hello"), "max-age=60")) },
			502, "", false, `transfer coding \"foo\"`},
		{"6.1 chunked twice", func(t *testing.T) *origin {
			return rawOrigin(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n", []byte("5\r\nhello\r\n0\r\n\r\n"))
		}, 502, "", false, "chunked other than last, or twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &testkit.Buffer{}
			o := tc.origin(t)
			h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
			for i, xcache := range []string{corralhttp.Miss, map[bool]string{true: corralhttp.Hit, false: corralhttp.Pass}[tc.stored]} {
				w := get(t, h, "/te")
				if tc.status == 502 {
					if w.Code != 502 || !strings.Contains(logs.String(), tc.logged) {
						t.Errorf("request %d: %d %q, want 502 and a log naming %s:\n%s", i, w.Code, w.Body.String(), tc.logged, logs)
					}
					continue
				}
				expect(t, w, xcache, tc.status, tc.body)
				if w.Header().Get("Transfer-Encoding") != "" || w.Header().Get("Content-Length") != "" && w.Header().Get("Content-Length") != "5" {
					t.Errorf("request %d: Transfer-Encoding %q, Content-Length %q", i, w.Header().Get("Transfer-Encoding"), w.Header().Get("Content-Length"))
				}
			}
		})
	}
}
