package diagnose

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// This file holds what Run reports, in the shapes corral.Check returns
// (corral's Severity, Finding and Report are aliases of these) and
// `corral check --json` prints.

// Severity grades a Finding.
type Severity int

// The grades of a Finding (corral's SeverityOK, SeverityWarning and
// SeverityFailure).
const (
	// OK: as corral needs it.
	OK Severity = iota
	// Warning: corral works and keeps its guarantees, doing less than it
	// could (the Finding says what: waiters that poll, a near cache that
	// serves nothing, a policy it could not read).
	Warning
	// Failure: a guarantee of corral's would break (the Finding says
	// which), or nothing would be cached at all.
	Failure
)

var severityNames = [...]string{"ok", "warning", "failure"}

// String returns "ok", "warning" or "failure".
func (s Severity) String() string {
	if s < 0 || int(s) >= len(severityNames) {
		return fmt.Sprintf("Severity(%d)", int(s))
	}
	return severityNames[s]
}

// MarshalText encodes s as its String, for JSON.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Finding is one thing Run looked at.
type Finding struct {
	// Topic is what was looked at: "redis" (the version), "mode" (a single
	// server or a Cluster), "pubsub", "eviction", "rights", "tracking"
	// (the near cache's rights) or "rtt" (the round-trip time).
	Topic    string   `json:"topic"`
	Severity Severity `json:"severity"`
	// Detail says what was found, and for a warning or a failure what it
	// costs, in one line.
	Detail string `json:"detail"`
}

// Report is what Run found: one Finding per topic, in the order of
// Finding.Topic, and the facts behind them.
type Report struct {
	// Version is the server's redis_version: the oldest of a Cluster's
	// masters. Empty when the user may read neither HELLO nor INFO.
	Version string `json:"version"`
	// Cluster is true for a Redis Cluster; Masters is how many masters
	// serve its slots (1 for a single server).
	Cluster bool `json:"cluster"`
	Masters int  `json:"masters"`
	// PubSub is how a Cache would send its notices: "sharded" (SPUBLISH),
	// "plain" (PUBLISH) or "none" (no channel rights: waiters re-check on
	// their own).
	PubSub string `json:"pubsub"`
	// Policies is the maxmemory-policy of each master, by address (a
	// single server's under the client's address, "server" when the client
	// has none); nil when it could not be read.
	Policies map[string]string `json:"policies,omitempty"`
	// Missing lists the rights corral uses that the user lacks: commands
	// ("EVALSHA", "CONFIG GET"), or "keys P:*", "channels P:*" and
	// "channel __redis__:invalidate". The Findings say which of them
	// matter.
	Missing []string `json:"missing"`
	// RTT is the median round-trip time of corral.CheckPings PINGs.
	RTT time.Duration `json:"rtt_ns"`

	Findings []Finding `json:"findings"`
}

// ErrCheckFailed is wrapped by Report.Err when Run found something that
// would break a guarantee of corral's (a Finding of Failure); the error
// names each such finding. corral.ErrCheckFailed is this value.
var ErrCheckFailed = errors.New("corral: Redis check failed")

// Err returns nil when no Finding is a failure, and otherwise an error
// wrapping ErrCheckFailed that names each failure.
func (r *Report) Err() error {
	var failed []string
	for _, f := range r.Findings {
		if f.Severity == Failure {
			failed = append(failed, f.Topic+": "+f.Detail)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return errorf("%w: %s", ErrCheckFailed, strings.Join(failed, "; "))
}

// add appends a Finding on topic, its Detail said by format and args.
func (r *Report) add(topic string, s Severity, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Topic: topic, Severity: s, Detail: fmt.Sprintf(format, args...)})
}

// missing adds each right not yet in r.Missing, skipping "".
func (r *Report) missing(rights ...string) {
	for _, right := range rights {
		if right != "" && !contains(r.Missing, right) {
			r.Missing = append(r.Missing, right)
		}
	}
}

// contains reports whether list holds s.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
