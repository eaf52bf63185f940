package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"time"
	"unicode"

	"github.com/corralhq/corral"
)

// Report is what a soak did and found.
type Report struct {
	Strategy      string
	Redis         string // what Redis it used, without a password
	OwnRedis      bool   // the soak started (and restarted) that Redis
	Seed          uint64
	Duration      time.Duration // as configured
	Elapsed       time.Duration // as run
	Processes     int
	Goroutines    int
	Keys          int
	TTL           time.Duration
	OriginLatency time.Duration

	Killed        int // workers killed (and replaced)
	RedisRestarts int
	Deletes       int
	DeletesFailed int
	Calls         int // Fetch calls recorded
	Errors        int // of which failed
	Loads         int // origin loads

	Result              // what Check found
	Stats  corral.Stats // the workers' counters, summed (a killed worker's as last reported)
}

// report checks the records and builds the report.
func (s *run) report(elapsed time.Duration, stopFailures []Failure) *Report {
	loads := s.origin.close()
	s.col.mu.Lock()
	calls, degraded, breakers := s.col.calls, s.col.degraded, s.col.breakers
	s.col.mu.Unlock()
	s.mu.Lock()
	rec := &Records{TTL: s.cfg.TTL, Loads: loads, Calls: calls, Deletes: s.deletes, Outages: s.outages,
		Kills: s.kills, Degraded: degraded, Breakers: breakers, Failures: append(s.failures, stopFailures...),
		Stopped: s.stopped}
	procs := s.all
	s.mu.Unlock()

	r := &Report{
		Strategy: s.cfg.Strategy, Redis: s.redisLabel(), OwnRedis: s.redis != nil, Seed: s.seed,
		Duration: s.cfg.Duration, Elapsed: elapsed, Processes: s.cfg.Processes, Goroutines: s.cfg.Goroutines,
		Keys: s.cfg.Keys, TTL: s.cfg.TTL, OriginLatency: s.cfg.OriginLatency,
		Killed: len(rec.Kills), RedisRestarts: len(rec.Outages), Deletes: len(rec.Deletes),
		Calls: len(rec.Calls), Loads: len(rec.Loads),
	}
	for _, d := range rec.Deletes {
		if d.Err != "" {
			r.DeletesFailed++
		}
	}
	for _, c := range rec.Calls {
		if c.Err != "" {
			r.Errors++
		}
	}
	for _, p := range procs {
		p.mu.Lock()
		if p.stats != nil {
			addStats(&r.Stats, *p.stats)
		}
		p.mu.Unlock()
	}
	r.Stats.BreakerOpen = false // a sum of "open now" means nothing
	r.Result = Check(rec)
	return r
}

// addStats adds b's counters to a's.
func addStats(a *corral.Stats, b corral.Stats) {
	av, bv := reflect.ValueOf(a).Elem(), reflect.ValueOf(b)
	for i := range av.NumField() {
		if f := av.Field(i); f.Kind() == reflect.Uint64 {
			f.SetUint(f.Uint() + bv.Field(i).Uint())
		}
	}
}

// Summary is the report in one line.
func (r *Report) Summary() string {
	name := "soak"
	if r.Strategy != StrategyCorral {
		name = "soak [" + r.Strategy + "]"
	}
	restarts := "redis not restarted (external)"
	if r.OwnRedis {
		restarts = fmt.Sprintf("redis restarted %dx", r.RedisRestarts)
		if r.Recoveries > 0 {
			restarts += fmt.Sprintf(" (workers read it again within %v of its answering, mean %v)",
				r.RecoveryMax.Round(time.Millisecond), r.RecoveryMean.Round(time.Millisecond))
		}
	}
	fetches := fmt.Sprintf("%d fetches, %d errors", r.Calls, r.Errors)
	if r.RedisRestarts > 0 {
		// Invariant 2 forgives these: see checkStale.
		fetches += fmt.Sprintf(", %d stale from memory while Redis could not be used", r.StaleFailSafe)
	}
	deletes := fmt.Sprintf("%d deletes", r.Deletes)
	if r.DeletesFailed > 0 {
		deletes += fmt.Sprintf(" (%d failed)", r.DeletesFailed)
		if r.RedisRestarts > 0 {
			// The chaos restarts Redis: a Delete sent while it is down fails,
			// and the reads after it are not checked against it.
			deletes = fmt.Sprintf("%d deletes (%d failed as Redis restarted, as expected)", r.Deletes, r.DeletesFailed)
		}
	}
	failOpen := fmt.Sprintf("%d fail-open", r.FailOpen)
	if r.RedisRestarts > 0 {
		if r.FailOpen > 0 {
			// While Redis is down, and its breaker open, calls load without
			// a lease: the fleet-wide bound does not count those.
			failOpen += ", expected while Redis restarted"
		}
		// Invariant 5 bounds them per restart, key and worker.
		bound := strconv.Itoa(FailOpenPerRestart)
		if r.LongRestarts > 0 {
			bound += fmt.Sprintf(", more in %d long %s, the longest down %v",
				r.LongRestarts, plural(r.LongRestarts, "restart"), r.LongestDown.Round(time.Millisecond))
		}
		failOpen += fmt.Sprintf("; per restart, key and worker: max %d (bound %s), mean %.2f", r.OutageMax, bound, r.OutageMean)
		if r.FailOpenOutside > 0 {
			failOpen += fmt.Sprintf("; %d outside restarts", r.FailOpenOutside)
		}
	}
	return fmt.Sprintf("%s: %v, seed %d, %d processes (%d killed/restarted), %s, %s, %s, "+
		"loads %d (%d leased, bound %d; %s), violations: %d",
		name, r.Duration, r.Seed, r.Processes, r.Killed, restarts, deletes, fetches,
		r.Loads, r.Leased, r.Bound, failOpen, len(r.Violations))
}

// WriteViolations writes each violation on a line, at most limit of each
// invariant, then how many more there were.
func (r *Report) WriteViolations(w io.Writer, limit int) error {
	shown := map[int]int{}
	more := map[int]int{}
	for _, v := range r.Violations {
		if shown[v.Invariant] >= limit {
			more[v.Invariant]++
			continue
		}
		shown[v.Invariant]++
		if _, err := fmt.Fprintln(w, "soak:", v); err != nil {
			return err
		}
	}
	for _, inv := range sortedKeys(InvariantNames) {
		if more[inv] > 0 {
			if _, err := fmt.Fprintf(w, "soak: ... and %d more violations of invariant %d (%s)\n", more[inv], inv, InvariantNames[inv]); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	type violation struct {
		Invariant int     `json:"invariant"`
		Name      string  `json:"name"`
		Key       *int    `json:"key,omitempty"`
		Worker    int     `json:"worker,omitempty"`
		AtSeconds float64 `json:"at_seconds"`
		Message   string  `json:"message"`
	}
	vs := make([]violation, 0, len(r.Violations))
	for _, v := range r.Violations {
		jv := violation{Invariant: v.Invariant, Name: InvariantNames[v.Invariant], Worker: v.Worker,
			AtSeconds: v.At.Seconds(), Message: v.Msg}
		if v.Key >= 0 {
			jv.Key = &v.Key
		}
		vs = append(vs, jv)
	}
	doc := map[string]any{
		"config": map[string]any{
			"strategy": r.Strategy, "redis": r.Redis, "own_redis": r.OwnRedis, "seed": r.Seed,
			"duration_seconds": r.Duration.Seconds(), "processes": r.Processes, "goroutines": r.Goroutines,
			"keys": r.Keys, "ttl_seconds": r.TTL.Seconds(), "origin_latency_ms": ms(r.OriginLatency),
			"deadline_ms": ms(Deadline), "redis_timeout_ms": ms(RedisTimeout), "lease_ttl_ms": ms(LeaseTTL),
			"stale_ttl_seconds": r.TTL.Seconds(), "jitter": Jitter, "breaker_cooldown_ms": ms(BreakerCooldown),
			"fail_open_per_restart_bound": FailOpenPerRestart, "recovery_grace_ms": ms(RecoveryGrace),
			"fail_safe_hold_ms": ms(heldFor(r.TTL)),
		},
		"summary": map[string]any{
			"elapsed_seconds": r.Elapsed.Seconds(), "killed": r.Killed, "redis_restarts": r.RedisRestarts,
			"deletes": r.Deletes, "deletes_failed": r.DeletesFailed, "fetches": r.Calls, "errors": r.Errors,
			"loads": r.Loads, "loads_leased": r.Leased, "loads_bound": r.Bound, "loads_fail_open": r.FailOpen,
			"loads_fail_open_in_restarts": r.OutageLoads, "loads_fail_open_outside_restarts": r.FailOpenOutside,
			"fail_open_per_restart_max": r.OutageMax, "fail_open_per_restart_mean": r.OutageMean,
			"long_restarts": r.LongRestarts, "longest_down_seconds": r.LongestDown.Seconds(),
			"recovery_max_ms": ms(r.RecoveryMax), "recovery_mean_ms": ms(r.RecoveryMean), "recoveries": r.Recoveries,
			"stale_joined_earlier_flight": r.StaleJoined, "stale_joined_examples": append([]string{}, r.StaleJoinedExamples...),
			"stale_fail_safe": r.StaleFailSafe, "stale_fail_safe_examples": append([]string{}, r.StaleFailSafeExamples...),
			"stale_unverifiable": r.Unverifiable,
			"violations":         len(r.Violations),
		},
		"violations": vs,
		"stats":      statsJSON(r.Stats),
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// statsJSON returns st's counters under snake_case names ("stale_hits").
func statsJSON(st corral.Stats) map[string]uint64 {
	m := map[string]uint64{}
	v := reflect.ValueOf(st)
	for i := range v.NumField() {
		if v.Field(i).Kind() != reflect.Uint64 {
			continue
		}
		var name []rune
		for j, c := range v.Type().Field(i).Name {
			if unicode.IsUpper(c) {
				if j > 0 {
					name = append(name, '_')
				}
				c = unicode.ToLower(c)
			}
			name = append(name, c)
		}
		m[string(name)] = v.Field(i).Uint()
	}
	return m
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
