package main

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Results is bench/results.json: everything one run measured, and what
// produced it.
type Results struct {
	Machine   string           `json:"machine"`
	Redis     string           `json:"redis"`
	Command   string           `json:"command"`
	Go        string           `json:"go"`
	Commit    string           `json:"commit,omitempty"` // corral's git commit, "+dirty" when the tree had changes
	Label     string           `json:"label,omitempty"`  // e.g. "development run on a busy machine"
	Started   string           `json:"started"`          // RFC 3339
	DurationS float64          `json:"duration_s"`
	LoadAvg   LoadAvg          `json:"load_average"`
	Scenarios []ScenarioResult `json:"scenarios"`
}

// LoadAvg is the machine's 1-minute load average when the run started and
// ended: a busy machine shows here.
type LoadAvg struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// ScenarioResult is one scenario's results, one row per system.
type ScenarioResult struct {
	Name          string         `json:"name"`
	Description   string         `json:"description"`
	Setup         string         `json:"setup"`
	Rounds        int            `json:"rounds"`
	RatioVsRawGet *float64       `json:"ratio_vs_raw_get,omitempty"` // hit-path: corral's ns/op over a raw GET's
	Results       []SystemResult `json:"results"`
}

// SystemResult is one system's row. Status is empty when the system ran;
// otherwise it says why there are no numbers ("not built yet", "cannot: …",
// "failed: …"). Pointer fields are left out when not measured.
type SystemResult struct {
	System string `json:"system"`
	Status string `json:"status,omitempty"`

	OriginLoads            *int64           `json:"origin_loads,omitempty"`        // the most of any round; after the warm-up, if any
	WarmupOriginLoads      *int64           `json:"warmup_origin_loads,omitempty"` // redis-outage-warm: the warm-up's, the most of any round
	OriginLoadsPerRound    []int64          `json:"origin_loads_per_round,omitempty"`
	PeakOriginConcurrency  *int64           `json:"peak_origin_concurrency,omitempty"`
	LatencyMS              *Latency         `json:"latency_ms,omitempty"`
	Requests               *int64           `json:"requests,omitempty"`
	Answered               *int64           `json:"answered,omitempty"`              // requests that got the origin's value
	NearHits               *int64           `json:"near_hits,omitempty"`             // corral-near: requests its near cache answered (Stats.NearHits), every round's
	FailSafeHits           *int64           `json:"fail_safe_hits,omitempty"`        // corral-near: requests answered from memory while Redis could not be used (Stats.FailSafeHits)
	LoadsPer1kRequests     *float64         `json:"loads_per_1k_requests,omitempty"` // steady traffic: origin loads per 1,000 requests
	RedisCommands          *int64           `json:"redis_commands,omitempty"`        // sent by the clients, mean per round
	RedisCommandsByName    map[string]int64 `json:"redis_commands_by_name,omitempty"`
	RedisServerCalls       *int64           `json:"redis_server_calls,omitempty"` // INFO commandstats: script-internal commands too
	RedisServerCallsByName map[string]int64 `json:"redis_server_calls_by_name,omitempty"`
	Errors                 *int64           `json:"errors,omitempty"`
	FirstError             string           `json:"first_error,omitempty"`

	HitFrom     string   `json:"hit_from,omitempty"` // hit-path: where a hit is answered from
	NsPerOp     *float64 `json:"ns_per_op,omitempty"`
	AllocsPerOp *float64 `json:"allocs_per_op,omitempty"`
}

// Latency is a latency summary in milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// ok reports whether the row has numbers.
func (r SystemResult) ok() bool { return r.Status == "" }

// result returns sc's row for system, if any.
func (sc ScenarioResult) result(system string) (SystemResult, bool) {
	for _, r := range sc.Results {
		if r.System == system {
			return r, true
		}
	}
	return SystemResult{}, false
}

// writeJSON writes res, indented, to path.
func writeJSON(path string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	// -out may name a fresh directory: its bench/ is made as the charts' is.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
