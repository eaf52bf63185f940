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
	r := &Report{Strategy: StrategyCorral, OwnRedis: true, RedisRestarts: 2, Loads: 30, Calls: 1000,
		Result: Result{Leased: 10, Bound: 12, FailOpen: 20, OutageLoads: 15, OutageMax: 3, OutageMean: 1.25,
			StaleFailSafe: 4, StaleFailSafeExamples: []string{"e1", "e2"},
			Recoveries: 8, RecoveryMax: 120 * ms_, RecoveryMean: 60 * ms_}}
	for _, want := range []string{
		"redis restarted 2x (workers read it again within 120ms of its answering, mean 60ms)",
		"1000 fetches, 0 errors, 4 stale from memory while Redis could not be used",
		"loads 30 (10 leased, bound 12; 20 fail-open, expected while Redis restarted; per restart, key and worker: max 3 (bound 2), mean 1.25)",
	} {
		if s := r.Summary(); !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
	r.LongRestarts, r.LongestDown, r.FailOpenOutside = 1, 1500*ms_, 7
	if s, want := r.Summary(), "max 3 (bound 2, more in 1 long restart, the longest down 1.5s), mean 1.25; 7 outside restarts)"; !strings.Contains(s, want) {
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
	for k, v := range map[string]float64{"loads_fail_open_in_restarts": 15, "fail_open_per_restart_max": 3, "fail_open_per_restart_mean": 1.25,
		"loads_fail_open_outside_restarts": 7, "long_restarts": 1, "longest_down_seconds": 1.5,
		"stale_fail_safe": 4, "recovery_max_ms": 120, "recovery_mean_ms": 60, "recoveries": 8} {
		if doc.Summary[k] != v {
			t.Errorf("summary %s = %v, want %v", k, doc.Summary[k], v)
		}
	}
	if ex, _ := doc.Summary["stale_fail_safe_examples"].([]any); len(ex) != 2 {
		t.Errorf("stale_fail_safe_examples = %v, want 2", doc.Summary["stale_fail_safe_examples"])
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
