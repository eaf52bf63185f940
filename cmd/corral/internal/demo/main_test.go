package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/cmd/corral/internal/demo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// smallConfig is a run small enough for a test: 4 instances x 50
// goroutines on 2 keys, 30 ms origin latency, every strategy.
func smallConfig() demo.Config {
	cfg := demo.DefaultConfig()
	cfg.Instances, cfg.Goroutines, cfg.Keys = 4, 50, 2
	cfg.OriginLatency = 30 * time.Millisecond
	cfg.Timeout = 30 * time.Second
	return cfg
}

// run runs the demo and returns its JSON document, decoded.
func run(t *testing.T, cfg demo.Config) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := demo.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	t.Logf("%s", buf.Bytes())
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, buf.Bytes())
	}
	return doc
}

// resultKeys are the keys of one result, exactly: the --json contract the
// README documents.
var resultKeys = []string{"errors", "latency_ms", "origin_loads", "origin_ms",
	"peak_origin_concurrency", "redis_commands", "requests", "strategy"}

// results checks the document's shape against the contract and returns
// its results by strategy.
func results(t *testing.T, doc map[string]any) map[string]map[string]any {
	t.Helper()
	if got := slices.Sorted(maps.Keys(doc)); !slices.Equal(got, []string{"config", "results"}) {
		t.Fatalf("document keys = %v, want [config results]", got)
	}
	if _, ok := doc["config"].(map[string]any); !ok {
		t.Fatalf("config = %#v, want an object", doc["config"])
	}
	list, ok := doc["results"].([]any)
	if !ok {
		t.Fatalf("results = %#v, want an array", doc["results"])
	}
	byName := make(map[string]map[string]any)
	for _, r := range list {
		res, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("result = %#v, want an object", r)
		}
		if got := slices.Sorted(maps.Keys(res)); !slices.Equal(got, resultKeys) {
			t.Fatalf("result keys = %v, want %v", got, resultKeys)
		}
		lat, ok := res["latency_ms"].(map[string]any)
		if !ok {
			t.Fatalf("latency_ms = %#v, want an object", res["latency_ms"])
		}
		if got := slices.Sorted(maps.Keys(lat)); !slices.Equal(got, []string{"max", "p50", "p99"}) {
			t.Fatalf("latency_ms keys = %v, want [max p50 p99]", got)
		}
		byName[res["strategy"].(string)] = res
	}
	return byName
}

// num returns the number at path in obj.
func num(t *testing.T, obj map[string]any, path ...string) float64 {
	t.Helper()
	for _, p := range path[:len(path)-1] {
		obj = obj[p].(map[string]any)
	}
	v, ok := obj[path[len(path)-1]].(float64)
	if !ok {
		t.Fatalf("%v = %#v, want a number", path, obj[path[len(path)-1]])
	}
	return v
}

// checkCorral asserts what corral promises: one origin load per key, never
// more than one at a time per key, and no errors.
func checkCorral(t *testing.T, res map[string]any, keys int) {
	t.Helper()
	if got := num(t, res, "origin_loads"); got != float64(keys) {
		t.Errorf("corral origin_loads = %v, want %d (one per key)", got, keys)
	}
	if got := num(t, res, "peak_origin_concurrency"); got > float64(keys) {
		t.Errorf("corral peak_origin_concurrency = %v, want at most %d", got, keys)
	}
	if got := num(t, res, "errors"); got != 0 {
		t.Errorf("corral errors = %v, want 0", got)
	}
}
