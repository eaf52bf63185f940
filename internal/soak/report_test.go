package soak

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The report gives invariant 5's figures beside the load counts, in the
// summary line and in JSON.
func TestReportFailOpenPerRestart(t *testing.T) {
	r := &Report{Strategy: StrategyCorral, OwnRedis: true, RedisRestarts: 2, Loads: 30,
		Result: Result{Leased: 10, Bound: 12, FailOpen: 20, OutageLoads: 15, OutageMax: 3, OutageMean: 1.25}}
	want := "loads 30 (10 leased, bound 12; 20 fail-open, expected while Redis restarted; per restart, key and worker: max 3 (bound 2), mean 1.25)"
	if s := r.Summary(); !strings.Contains(s, want) {
		t.Errorf("summary %q lacks %q", s, want)
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct{ Config, Summary map[string]any }
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, buf.Bytes())
	}
	for k, v := range map[string]float64{"loads_fail_open_in_restarts": 15, "fail_open_per_restart_max": 3, "fail_open_per_restart_mean": 1.25} {
		if doc.Summary[k] != v {
			t.Errorf("summary %s = %v, want %v", k, doc.Summary[k], v)
		}
	}
	if c := doc.Config; c["fail_open_per_restart_bound"] != 2.0 || c["recovery_grace_ms"] != 650.0 {
		t.Errorf("config: bound %v, grace %vms; want 2, 650", c["fail_open_per_restart_bound"], c["recovery_grace_ms"])
	}

	// Without restarts, there is nothing to say per restart.
	r.RedisRestarts = 0
	if s := r.Summary(); strings.Contains(s, "per restart") {
		t.Errorf("summary without restarts: %q", s)
	}
}
