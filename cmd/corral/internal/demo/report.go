package demo

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"time"
)

// Report is the outcome of a demo run: the JSON document of
// `corral demo --json`.
type Report struct {
	Config  ReportConfig `json:"config"`
	Results []Result     `json:"results"`

	// Summary describes the scenario in a line, for the human output.
	Summary string `json:"-"`
}

// ReportConfig is the settings a run actually used.
type ReportConfig struct {
	Scenario        string   `json:"scenario"`
	Redis           string   `json:"redis"`  // "embedded", or the URL with its password redacted
	Origin          string   `json:"origin"` // "ql (embedded)" or "postgres"
	OriginRows      int      `json:"origin_rows"`
	Instances       int      `json:"instances"`
	Goroutines      int      `json:"goroutines"`
	Keys            int      `json:"keys"`
	OriginLatencyMS float64  `json:"origin_latency_ms"`
	TTLSeconds      float64  `json:"ttl_seconds"`
	StaleTTLSeconds float64  `json:"stale_ttl_seconds"` // corral's stale-while-revalidate window
	Strategies      []string `json:"strategies"`

	// RequestsPerStrategy is what the stampede sends; absent for expiry,
	// which sends as many as are served in its duration.
	RequestsPerStrategy int `json:"requests_per_strategy,omitempty"`

	// DurationSeconds and ThinkMS are the expiry scenario's run length and
	// pause between a goroutine's requests; absent for the stampede.
	DurationSeconds *float64 `json:"duration_seconds,omitempty"`
	ThinkMS         *float64 `json:"think_ms,omitempty"`
}

// Result is what one strategy's run did to the origin and to Redis.
type Result struct {
	Strategy string `json:"strategy"`
	Requests int    `json:"requests"`
	// OriginLoads is the number of origin queries in the run, the first
	// load of each key and every refresh included.
	OriginLoads int64 `json:"origin_loads"`
	// PeakOriginConcurrency is the most origin queries running at once.
	PeakOriginConcurrency int64 `json:"peak_origin_concurrency"`
	// OriginMS is the mean duration of one origin query, added latency
	// included; 0 when none ran.
	OriginMS float64 `json:"origin_ms"`
	// LatencyMS is the requests' latency: from the release of the
	// stampede, or from each request's own start in the expiry scenario.
	LatencyMS Latency `json:"latency_ms"`
	// RedisCommands is the commands the run sent to Redis, connection
	// set-up left out, pub/sub (un)subscriptions included.
	RedisCommands uint64 `json:"redis_commands"`
	// Errors is the requests that failed or returned wrong bytes.
	Errors int64 `json:"errors"`
	// FirstError describes one of the errors, for the human output.
	FirstError string `json:"-"`
}

// Latency is a latency distribution in ms, rounded to 0.1 ms.
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// WriteJSON writes r as one JSON document and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// summarize returns the nearest-rank percentiles of lat.
func summarize(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[max(i, 0)]
	}
	return Latency{P50: durMS(rank(0.50)), P99: durMS(rank(0.99)), Max: durMS(s[len(s)-1])}
}

func durMS(d time.Duration) float64 { return roundMS(float64(d) / float64(time.Millisecond)) }

// roundMS rounds a duration in ms to 0.1 ms.
func roundMS(ms float64) float64 { return math.Round(ms*10) / 10 }
