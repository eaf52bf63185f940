package corralhttp

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// The access log (Options.AccessLog): one record per request, written
// once it is answered, with what an operator needs to follow a request
// and nothing a client could have put a secret in but its path: the
// query (tokens, signatures) and every header (Authorization, Cookie) are
// left out.

// logWriter is the ResponseWriter of a request whose answer is logged: it
// notes the status and counts the body's bytes.
type logWriter struct {
	http.ResponseWriter
	status int   // the final status written; 0 while none is
	bytes  int64 // of body written
}

// WriteHeader passes a 1xx on, and notes a final status.
func (w *logWriter) WriteHeader(code int) {
	if w.status == 0 && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *logWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController (which ReverseProxy flushes
// through) reach the server's ResponseWriter.
func (w *logWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logAccess writes r's access log record: answered through w as label, in
// took. Status 0 says no answer was written (the client left first).
func (h *Handler) logAccess(r *http.Request, w *logWriter, label string, took time.Duration) {
	h.opts.AccessLog.LogAttrs(context.Background(), slog.LevelInfo, "corral: request",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.Int("status", w.status),
		slog.String("cache", label),
		slog.Int64("bytes", w.bytes),
		slog.Duration("duration", took),
		slog.String("remote", r.RemoteAddr))
}
