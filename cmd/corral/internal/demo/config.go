package demo

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Defaults of Config, used by DefaultConfig and documented in `corral demo --help`.
const (
	DefaultInstances     = 8
	DefaultGoroutines    = 250
	DefaultKeys          = 1
	DefaultOriginLatency = 100 * time.Millisecond
	DefaultTTL           = time.Minute // the stampede's: values outlive the run
	DefaultExpiryTTL     = time.Second // the expiry scenario's: keys expire several times in a run
	DefaultTimeout       = time.Minute
	DefaultScenario      = "stampede"
	DefaultDuration      = 5 * time.Second
	DefaultThink         = 10 * time.Millisecond
)

// Config is one demo run's settings. Start from DefaultConfig: unlike the
// library's Options, a zero here is taken literally where it makes sense
// (OriginLatency 0 is no added latency) and rejected where it does not. The
// exceptions are TTL and StaleTTL, whose defaults depend on the scenario:
// TTL 0 and StaleTTL nil mean the scenario's default.
type Config struct {
	// RedisURL is a redis:// or rediss:// URL. Empty means an embedded
	// in-process Redis (miniredis), reported as "embedded".
	RedisURL string

	// PostgresDSN, when set, makes PostgreSQL the origin instead of the
	// embedded ql database.
	PostgresDSN string

	Instances  int // independent app instances, each with its own Redis client
	Goroutines int // concurrent callers per instance
	Keys       int // hot keys the requests are spread over (request i asks for key i mod Keys)

	// OriginLatency is added to every origin query, to model the network
	// distance to a remote database.
	OriginLatency time.Duration

	// Strategies are run in this order, each on fresh keys.
	Strategies []string

	// Scenario names how requests reach the instances; see Scenarios.
	Scenario string

	// TTL is the (soft) time to live of cached values. 0 means the
	// scenario's default: DefaultTTL for stampede, so values outlive the
	// run and a shared Redis cleans up after it; DefaultExpiryTTL for
	// expiry, so hot keys expire several times during the run.
	TTL time.Duration

	// StaleTTL is corral's stale-while-revalidate window
	// (corral.Options.StaleTTL); naive and seed have none. nil means the
	// scenario's default: none for stampede, the TTL for expiry.
	StaleTTL *time.Duration

	// Duration is how long each strategy's run of the expiry scenario
	// sends requests.
	Duration time.Duration

	// Think is how long each goroutine of the expiry scenario pauses
	// between its requests (0: none).
	Think time.Duration

	// Timeout bounds each strategy's run, counted after Duration for the
	// expiry scenario; a request still running then counts as an error.
	Timeout time.Duration

	// Progress, when not nil, receives a progress bar while each strategy
	// runs (meant for stderr).
	Progress io.Writer

	// Logger receives corral's warnings. nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the settings of `corral demo` without flags.
func DefaultConfig() Config {
	return Config{
		Instances:     DefaultInstances,
		Goroutines:    DefaultGoroutines,
		Keys:          DefaultKeys,
		OriginLatency: DefaultOriginLatency,
		Strategies:    StrategyNames(),
		Scenario:      DefaultScenario,
		Duration:      DefaultDuration,
		Think:         DefaultThink,
		Timeout:       DefaultTimeout,
	}
}

// Requests is the number of requests each strategy serves.
func (c Config) Requests() int { return c.Instances * c.Goroutines }

// resolve fills in the scenario's defaults and checks the settings: it
// returns the settings the run uses, and its scenario, or the first setting
// that makes no sense.
func (c Config) resolve() (Config, Scenario, error) {
	sc, err := lookupScenario(c.Scenario)
	if err != nil {
		return Config{}, nil, err
	}
	c = sc.Defaults(c)
	if err := c.validate(); err != nil {
		return Config{}, nil, err
	}
	if err := sc.Validate(c); err != nil {
		return Config{}, nil, err
	}
	return c, sc, nil
}

// validate reports the first setting that makes no sense, once the
// scenario's defaults are filled in.
func (c Config) validate() error {
	switch {
	case c.Instances < 1:
		return fmt.Errorf("demo: instances must be at least 1 (got %d)", c.Instances)
	case c.Goroutines < 1:
		return fmt.Errorf("demo: goroutines must be at least 1 (got %d)", c.Goroutines)
	case c.Keys < 1:
		return fmt.Errorf("demo: keys must be at least 1 (got %d)", c.Keys)
	case c.Keys > customers:
		return fmt.Errorf("demo: keys must be at most %d, the customers in the data set (got %d)", customers, c.Keys)
	case c.Keys > c.Requests():
		return fmt.Errorf("demo: %d keys cannot all be asked for by %d requests (instances x goroutines)", c.Keys, c.Requests())
	case c.OriginLatency < 0:
		return fmt.Errorf("demo: origin latency is negative (%v)", c.OriginLatency)
	case c.TTL < time.Millisecond:
		return fmt.Errorf("demo: TTL must be at least 1ms (got %v)", c.TTL)
	case c.StaleTTL == nil:
		return errors.New("demo: no stale TTL") // the scenario's Defaults sets it
	case *c.StaleTTL < 0:
		return fmt.Errorf("demo: stale TTL is negative (%v)", *c.StaleTTL)
	case c.Duration <= 0:
		return fmt.Errorf("demo: duration must be positive (got %v)", c.Duration)
	case c.Think < 0:
		return fmt.Errorf("demo: think time is negative (%v)", c.Think)
	case c.Timeout <= 0:
		return fmt.Errorf("demo: timeout must be positive (got %v)", c.Timeout)
	case len(c.Strategies) == 0:
		return errors.New("demo: no strategy to run")
	}
	seen := make(map[string]bool)
	for _, name := range c.Strategies {
		if _, err := LookupStrategy(name); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("demo: strategy %q listed twice", name)
		}
		seen[name] = true
	}
	return nil
}

// logger returns c.Logger, or one that discards.
func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}
