package corralhttp_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
)

// newJSONLog returns a logger writing JSON records to w.
func newJSONLog(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// TestAccessLog: Options.AccessLog gets one record per request, with its
// method, path, status, X-Cache value, bytes and duration, and never a
// credential: no header, no query.
func TestAccessLog(t *testing.T) {
	srv := redistest.Start(t)
	o := startOrigin(t, fixed("public, max-age=60", "hello"))
	logs := &testkit.Buffer{}
	h := newHandler(t, srv, o, func(o *corralhttp.Options) { o.AccessLog = newJSONLog(logs); o.MaxURLBytes = 100 })
	secrets := []string{"Authorization: Bearer secret-in-authorization", "Cookie: id=secret-in-cookie"}
	type record struct {
		Msg, Method, Path, Cache string
		Status                   int
		Bytes                    int64
		Duration                 int64
	}
	want := []record{
		{Method: "GET", Path: "/a", Status: 200, Cache: corralhttp.Miss, Bytes: 5},
		{Method: "GET", Path: "/a", Status: 200, Cache: corralhttp.Hit, Bytes: 5},
		{Method: "HEAD", Path: "/a", Status: 200, Cache: corralhttp.Hit},
		{Method: "POST", Path: "/a", Status: 200, Cache: corralhttp.Pass, Bytes: 5},
		{Method: "GET", Path: "/" + strings.Repeat("x", 100), Status: 414, Cache: "ERROR", Bytes: int64(len("corral: request URI over 100 bytes\n"))},
	}
	for _, rec := range want {
		do(t, h, rec.Method, rec.Path+"?token=secret-in-query", secrets...)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d records for %d requests:\n%s", len(lines), len(want), logs)
	}
	for i, line := range lines {
		var got record
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("record %d: %v: %s", i, err, line)
		}
		if got.Msg != "corral: request" || got.Duration <= 0 {
			t.Errorf("record %d: %s", i, line)
		}
		got.Msg, got.Duration = "", 0
		if got != want[i] {
			t.Errorf("record %d: %+v, want %+v", i, got, want[i])
		}
	}
	if strings.Contains(logs.String(), "secret-in-") {
		t.Errorf("the access log shows a credential:\n%s", logs)
	}
	if !strings.Contains(logs.String(), `"remote":"192.0.2.1:1234"`) {
		t.Errorf("the access log lacks the client's address:\n%s", logs)
	}
	_ = http.MethodGet
}
