package warn

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestMinutely checks that one warning a minute gets through at warn
// level, and the rest at debug level.
func TestMinutely(t *testing.T) {
	var m Minutely
	if !m.Allow() || m.Allow() {
		t.Fatal("Allow: want the first through, not the second")
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var n Minutely
	n.Log(log, "first")
	n.Log(log, "second")
	out := buf.String()
	if !strings.Contains(out, "level=WARN msg=first") || !strings.Contains(out, "level=DEBUG msg=second") {
		t.Errorf("log:\n%s", out)
	}
}

// TestKeysOnce checks once per key, and that the sets sharing a Keys
// count toward one bound: past MaxKeys in all, the set a new key goes to
// forgets its keys.
func TestKeysOnce(t *testing.T) {
	var k Keys
	var a, b sync.Map
	if !k.Once(&a, "x") || k.Once(&a, "x") || !k.Once(&b, "x") {
		t.Fatal("Once: want each key once per set")
	}
	for i := range MaxKeys - 2 {
		k.Once(&b, strconv.Itoa(i))
	}
	if k.Once(&a, "x") || !k.Once(&a, "y") {
		t.Fatal("Once: want x remembered, y new, at MaxKeys")
	}
	if !k.Once(&a, "x") {
		t.Error("past MaxKeys, want a set that forgot its keys")
	}
	if k.Once(&a, "x") {
		t.Error("want the key remembered again")
	}
}
