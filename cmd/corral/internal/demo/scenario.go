package demo

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Scenario is how requests reach the instances during one strategy's run:
// when they start, which keys they ask for, how long it lasts. It sends
// every request through Trial.Request, which measures and checks it.
type Scenario interface {
	// Name is the scenario's name in --scenario and in reports.
	Name() string
	// Help says in one line what the scenario does, for --help.
	Help() string
	// Defaults returns cfg with the settings whose default depends on the
	// scenario filled in: TTL when it is 0, StaleTTL when it is nil.
	Defaults(cfg Config) Config
	// Validate reports a setting that makes no sense for the scenario;
	// cfg has its defaults filled in and passed Config's own checks.
	Validate(cfg Config) error
	// Summary describes the scenario for a report's header.
	Summary(cfg Config) string
	// Requests is how many requests Run sends per strategy, or 0 when it
	// sends as many as it can in Length.
	Requests(cfg Config) int
	// Length is how long Run keeps sending requests, or 0 when it sends
	// Requests at once.
	Length(cfg Config) time.Duration
	// Run sends the requests and returns when every one has returned;
	// ctx ends the run (requests still running then fail). It calls
	// t.Begin when the requests start.
	Run(ctx context.Context, cfg Config, t *Trial)
}

var scenarios = []Scenario{stampede{}, expiry{}}

// Scenarios returns every scenario, the default first.
func Scenarios() []Scenario { return append([]Scenario(nil), scenarios...) }

// ScenarioNames returns the names of every scenario, the default first.
func ScenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.Name()
	}
	return names
}

func lookupScenario(name string) (Scenario, error) {
	for _, s := range scenarios {
		if s.Name() == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("demo: unknown scenario %q (known: %s)", name, strings.Join(ScenarioNames(), ", "))
}
