package main

import (
	"fmt"
	"time"
)

// workload is how requests reach the app instances in a scenario.
type workload int

const (
	// burst: every goroutine of every instance asks once, all released at
	// the same instant, for cold keys; goroutine i (counted over all
	// instances) asks for key i mod Keys.
	burst workload = iota
	// steady: every goroutine loops for Duration: a request, then Think.
	steady
	// hitPath: one instance, one goroutine, hits on warm keys, timed per op.
	hitPath
)

// Scenario is one measured situation. Every system runs it against the same
// Redis and the same origin; trials of different systems are interleaved,
// round after round.
type Scenario struct {
	Name        string
	Description string // what it shows, for BENCHMARKS.md
	Workload    workload

	Instances  int // app instances, each with its own Redis client(s)
	Goroutines int // per instance
	Keys       int
	Zipf       bool // steady: keys drawn by a Zipf law (s = 1.1) instead of uniformly

	OriginLatency time.Duration
	ValueSize     int
	TTL           time.Duration
	StaleTTL      time.Duration // corral's stale window (the others have none)
	Duration      time.Duration // steady: how long the goroutines loop
	Think         time.Duration // steady: pause between a goroutine's requests
	Rounds        int

	Stall  time.Duration // burst: a DEBUG SLEEP of Redis as the burst arrives
	Outage bool          // Redis is down (killed) during the workload
	// Warm: before the workload (and the outage), every instance is warmed
	// on every key (warm.go); origin loads count from the end of the warm-up.
	Warm bool

	// OneLoad marks the scenarios of the hard target: corral loads each key
	// exactly once, in every round.
	OneLoad bool

	Timeout time.Duration // bound on one request
	HitTime time.Duration // hitPath: measuring time per system and round
}

// requests is the number of requests of a burst.
func (s *Scenario) requests() int { return s.Instances * s.Goroutines }

// Setup describes the scenario's parameters in one line.
func (s *Scenario) Setup() string {
	switch s.Workload {
	case hitPath:
		return fmt.Sprintf("1 instance, 1 goroutine, %d warm keys of %s, TTL %v; %v of hits per system and round, %d %s",
			s.Keys, size(s.ValueSize), s.TTL, s.HitTime, s.Rounds, plural(s.Rounds, "round", "rounds"))
	case steady:
		keys := "uniform"
		if s.Zipf {
			keys = "Zipf s=1.1"
		}
		extra := ""
		switch {
		case s.Outage && s.Warm:
			extra = "; every key warm first (in Redis and in each system's memory as it allows), then Redis killed for the whole run"
		case s.Outage:
			extra = "; Redis killed for the whole run"
		}
		if s.StaleTTL > 0 {
			extra += fmt.Sprintf("; corral's stale window %v", s.StaleTTL)
		}
		return fmt.Sprintf("%d instances x %d goroutines loop for %v (pause %v), %d keys (%s), values %s, origin %v, TTL %v%s; %d %s",
			s.Instances, s.Goroutines, s.Duration, s.Think, s.Keys, keys, size(s.ValueSize), s.OriginLatency, s.TTL, extra,
			s.Rounds, plural(s.Rounds, "round", "rounds"))
	default:
		extra := ""
		if s.Stall > 0 {
			extra = fmt.Sprintf("; Redis paused %v (DEBUG SLEEP) as the burst arrives", s.Stall)
		}
		return fmt.Sprintf("%d instances x %d goroutines, all at once, on %d cold %s, values %s, origin %v%s; %d %s",
			s.Instances, s.Goroutines, s.Keys, plural(s.Keys, "key", "keys"), size(s.ValueSize), s.OriginLatency, extra,
			s.Rounds, plural(s.Rounds, "round", "rounds"))
	}
}

func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// scenarios returns every scenario, sized for `make bench` (about 10
// minutes on 2 cores) or, with quick, for a check in about a minute (long-load
// keeps its 9 s load: its point is a load longer than the lease; the outage
// scenarios keep their 3 s: a call to the dead Redis takes over a second to
// fail, go-redis retrying the dial and the command, so a shorter run would
// time each goroutine's first request and nothing else).
func scenarios(quick bool) []*Scenario {
	stampede := func(name string, origin time.Duration) *Scenario {
		return &Scenario{
			Name: name,
			Description: fmt.Sprintf("A cold key under a stampede: every goroutine of 8 app instances asks for it at the same instant; the origin takes %v. "+
				"The hard target: corral loads it once.", origin),
			Workload: burst, Instances: 8, Goroutines: 250, Keys: 1,
			OriginLatency: origin, ValueSize: 1 << 10, TTL: 5 * time.Minute, Rounds: 3, OneLoad: true,
		}
	}
	// outage: Redis is killed while 8 instances loop over 10 keys; with
	// warm, after every key was cached.
	outage := func(name string, warm bool, desc string) *Scenario {
		return &Scenario{
			Name: name, Description: desc,
			Workload: steady, Instances: 8, Goroutines: 25, Keys: 10, Outage: true, Warm: warm,
			OriginLatency: 20 * time.Millisecond, ValueSize: 1 << 10, TTL: 5 * time.Minute,
			Duration: 3 * time.Second, Think: 10 * time.Millisecond, Rounds: 1,
			Timeout: 5 * time.Second, // a caller's deadline: without one, a system that hangs would hang the run
		}
	}
	all := []*Scenario{
		stampede("cold-stampede-20ms", 20*time.Millisecond),
		stampede("cold-stampede-200ms", 200*time.Millisecond),
		stampede("cold-stampede-2s", 2*time.Second),
		{
			Name: "expiry-zipf",
			Description: "Steady traffic over 10,000 keys with Zipf-distributed popularity and short TTLs, so hot keys expire again and again under load. " +
				"Fewer origin loads for the same traffic is better; so is a low p99.",
			Workload: steady, Instances: 8, Goroutines: 16, Keys: 10_000, Zipf: true,
			OriginLatency: 20 * time.Millisecond, ValueSize: 1 << 10, TTL: 2 * time.Second, StaleTTL: 2 * time.Second,
			Duration: 30 * time.Second, Think: 5 * time.Millisecond, Rounds: 1,
		},
		{
			Name: "hit-path",
			Description: "The cost of a hit: sequential hits on 1,000 warm keys of 1 KiB. The baseline is a raw GET of the same value on the same go-redis client corral uses. " +
				"Targets: corral's Redis hit at most 1.1x a raw GET; corral-near's hit at most 150 ns, with no allocation.",
			Workload: hitPath, Instances: 1, Goroutines: 1, Keys: 1000, ValueSize: 1 << 10, TTL: 10 * time.Minute,
			Rounds: 3, HitTime: time.Second,
		},
		{
			Name: "big-value",
			Description: "A cold stampede on a 16 MiB value: the load's result has to reach every instance. " +
				"The hard target: corral loads it once.",
			Workload: burst, Instances: 8, Goroutines: 8, Keys: 1,
			OriginLatency: 100 * time.Millisecond, ValueSize: 16 << 20, TTL: 5 * time.Minute, Rounds: 2, OneLoad: true,
		},
		{
			Name: "redis-stall",
			Description: "A cold stampede that arrives while Redis is paused for 700 ms (DEBUG SLEEP), as during a slow fork or a long command. " +
				"A pause shorter than the systems' timeouts should cost waiting, not loads. The hard target: corral loads once.",
			Workload: burst, Instances: 8, Goroutines: 250, Keys: 1,
			OriginLatency: 100 * time.Millisecond, ValueSize: 1 << 10, TTL: 5 * time.Minute, Rounds: 3, OneLoad: true,
			Stall: 700 * time.Millisecond,
		},
		outage("redis-outage", false,
			"Redis is down (its process killed; connections refused) while steady traffic continues over 10 keys. "+
				"What matters: how many requests are still answered, at what origin load and latency."),
		outage("redis-outage-warm", true,
			"The traffic of redis-outage, but Redis dies after every key was cached: in Redis, and in each system's memory as far as it keeps one "+
				"(corral-near: until its near cache answers each key in every instance; sturdyc: its in-memory cache, after one GetOrFetch per key and instance; "+
				"corral without a near cache and go-redis-cache, without its local cache, keep nothing in memory, so only in Redis). "+
				"Redis is killed as soon as the last instance is warm. Origin loads count the outage's only, not the warm-up's."),
		{
			Name: "long-load",
			Description: "A cold stampede on a key whose load takes 9 s: longer than corral's lease (5 s, renewed by its watchdog while the load runs) " +
				"and redsync's mutex (8 s), shorter than corral's LoadTimeout (10 s) and seed's lock (10 s); rueidisaside's lock lives as long as the cache TTL (5 min). " +
				"Every system runs with its default settings.",
			Workload: burst, Instances: 8, Goroutines: 50, Keys: 1,
			OriginLatency: 9 * time.Second, ValueSize: 1 << 10, TTL: 5 * time.Minute, Rounds: 1,
		},
	}
	for _, s := range all {
		if s.Timeout == 0 {
			s.Timeout = 60 * time.Second
		}
		if quick {
			s.Rounds = 1
			if s.Workload != hitPath {
				s.Instances = min(s.Instances, 4)
				s.Goroutines = max(1, s.Goroutines/5)
			}
			if !s.Outage {
				s.Duration /= 5
			}
			s.HitTime /= 5
		}
	}
	return all
}
