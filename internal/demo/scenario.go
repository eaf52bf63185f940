package demo

import (
	"context"
	"fmt"
	"strings"
)

// Scenario is how requests reach the instances during one strategy's run:
// when they start, which keys they ask for, how long it lasts. It sends
// every request through Trial.Request, which measures and checks it.
type Scenario interface {
	// Name is the scenario's name in reports (and, later, --scenario).
	Name() string
	// Summary describes the scenario for a report's header.
	Summary(cfg Config) string
	// Requests is how many requests Run sends per strategy (for progress).
	Requests(cfg Config) int
	// Run sends the requests and returns when every one has returned;
	// ctx ends the run (requests still running then fail).
	Run(ctx context.Context, t *Trial)
}

var scenarios = []Scenario{stampede{}}

func lookupScenario(name string) (Scenario, error) {
	var names []string
	for _, s := range scenarios {
		if s.Name() == name {
			return s, nil
		}
		names = append(names, s.Name())
	}
	return nil, fmt.Errorf("demo: unknown scenario %q (known: %s)", name, strings.Join(names, ", "))
}
