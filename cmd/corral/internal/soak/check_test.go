package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

const ms_ = time.Millisecond

// load is a leased load of key by worker starting at t, taking the origin
// latency.
func load(key, worker int, t time.Duration) Load {
	return Load{Key: key, Worker: worker, Start: t, Arrive: t + ms_, End: t + 21*ms_, Version: 1}
}

func failOpenLoad(key, worker int, t time.Duration) Load {
	l := load(key, worker, t)
	l.FailOpen = true
	return l
}

// refreshes are the loads of a healthy fleet: key's loads one soft TTL
// apart, by rotating workers, from 0 to until.
func refreshes(key int, until time.Duration) []Load {
	var ls []Load
	for i, t := 0, time.Duration(0); t < until; i, t = i+1, t+DefaultTTL {
		ls = append(ls, load(key, 1+i%4, t))
	}
	return ls
}

// only returns the violations of invariant inv.
func only(res Result, inv int) []Violation {
	var vs []Violation
	for _, v := range res.Violations {
		if v.Invariant == inv {
			vs = append(vs, v)
		}
	}
	return vs
}

func mustPass(t *testing.T, res Result) {
	t.Helper()
	for _, v := range res.Violations {
		t.Errorf("unexpected %v", v)
	}
}

func mustFind(t *testing.T, res Result, inv int, want string) {
	t.Helper()
	for _, v := range only(res, inv) {
		if strings.Contains(v.Msg, want) {
			t.Logf("found: %v", v)
			return
		}
	}
	t.Errorf("no violation of invariant %d with %q among %v", inv, want, res.Violations)
}

func TestCheckPassesOneLoadPerRefresh(t *testing.T) {
	r := &Records{TTL: DefaultTTL, Loads: append(refreshes(0, 10*time.Second), refreshes(1, 10*time.Second)...)}
	res := Check(r)
	mustPass(t, res)
	if res.Leased != 40 || res.Bound != 40 || res.FailOpen != 0 {
		t.Errorf("leased %d, bound %d, fail-open %d; want 40, 40, 0", res.Leased, res.Bound, res.FailOpen)
	}
}

// A stampede: every worker loads the key at its expiry.
func TestCheckCatchesStampede(t *testing.T) {
	loads := refreshes(0, 2*time.Second)
	for w := range 12 {
		loads = append(loads, load(0, 1+w%4, 2*time.Second+time.Duration(w)*ms_))
	}
	res := Check(&Records{TTL: DefaultTTL, Loads: loads})
	mustFind(t, res, InvLoads, "key k0: 12 loads started within 11ms")
	mustFind(t, res, InvLoads, "worker 1 ran 3 loads of key k0 at once")
	if len(only(res, InvLoads)) > 5 { // one fleet-wide report per burst, one per worker
		t.Errorf("a burst is reported once, got %v", res.Violations)
	}
}

// Refreshing more often than the TTL is caught too, with no overlap at all.
func TestCheckCatchesEarlyReloads(t *testing.T) {
	var loads []Load
	for i := range 10 {
		loads = append(loads, load(3, 1, time.Duration(i)*300*ms_))
	}
	mustFind(t, Check(&Records{TTL: DefaultTTL, Loads: loads}), InvLoads, "key k3: 2 loads started within 300ms")
}

// Each event allows one more load in its window, and no more.
func TestCheckAllowsOneLoadPerEvent(t *testing.T) {
	base := func() []Load { return []Load{load(0, 1, time.Second), load(0, 2, time.Second+50*ms_)} }
	for name, r := range map[string]*Records{
		"delete":        {Deletes: []Delete{{Key: 0, Version: 2, Start: time.Second + 10*ms_, End: time.Second + 11*ms_}}},
		"failed delete": {Deletes: []Delete{{Key: 0, Version: 2, Start: -time.Second, End: 0, Err: "timeout"}}},
		"restart":       {Outages: []Outage{{Down: time.Second + 10*ms_, Up: time.Second + 40*ms_}}},
		"degraded":      {Degraded: []Interval{{Worker: 1, From: time.Second + 5*ms_, To: time.Second + 6*ms_}}},
		"takeover":      {Kills: []Kill{{Worker: 1, At: time.Second + 20*ms_}}},
	} {
		t.Run(name, func(t *testing.T) {
			r.TTL, r.Loads = DefaultTTL, base()
			res := Check(r)
			mustPass(t, res)
			if res.Bound != 2 {
				t.Errorf("bound %d, want 2", res.Bound)
			}
			r.Loads = append(r.Loads, load(0, 3, time.Second+60*ms_))
			mustFind(t, Check(r), InvLoads, "3 loads started within 60ms")
		})
	}
	// A Delete of another key, or more than LeaseTTL before, allows
	// nothing; nor does trouble in a worker that was not loading the key.
	r := &Records{TTL: DefaultTTL, Loads: base(), Deletes: []Delete{
		{Key: 1, Version: 2, Start: time.Second + 10*ms_, End: time.Second + 11*ms_},
		{Key: 0, Version: 2, Start: -10 * ms_, End: -5 * ms_},
	}, Degraded: []Interval{{Worker: 3, From: time.Second + 5*ms_, To: time.Second + 6*ms_}}}
	mustFind(t, Check(r), InvLoads, "2 loads started within 50ms")
}

// A worker that closes its Cache at the end while loading a key, past
// Close's grace, cuts the load short and hands the lease back: one more
// load. A load cut short before the stop, or a stop without a cut load,
// allows nothing.
func TestCheckAllowsOneLoadPerCloseCut(t *testing.T) {
	cut := load(0, 1, time.Second)
	cut.End, cut.Cut = time.Second+10*ms_, true
	r := &Records{TTL: DefaultTTL, Loads: []Load{cut, load(0, 2, time.Second+12*ms_)}, Stopped: time.Second + 5*ms_}
	mustPass(t, Check(r))
	r.Loads = append(r.Loads, load(0, 3, time.Second+14*ms_))
	mustFind(t, Check(r), InvLoads, "3 loads started within 14ms")

	for name, r := range map[string]*Records{
		"cut before the stop": {Loads: []Load{cut, load(0, 2, time.Second+12*ms_)}, Stopped: time.Second + 11*ms_},
		"no stop":             {Loads: []Load{cut, load(0, 2, time.Second+12*ms_)}},
		"stop, no cut":        {Loads: []Load{load(0, 1, time.Second), load(0, 2, time.Second+12*ms_)}, Stopped: time.Second + 5*ms_},
	} {
		t.Run(name, func(t *testing.T) {
			r.TTL = DefaultTTL
			mustFind(t, Check(r), InvLoads, "2 loads started within 12ms")
		})
	}
}

// Fail-open loads are left out of the fleet-wide bound but still bounded
// per process: one flight at a time (plus a background refresh).
func TestCheckFailOpen(t *testing.T) {
	var loads []Load
	for w := 1; w <= 4; w++ {
		for i := range 50 { // back to back, each flight after the last
			loads = append(loads, failOpenLoad(0, w, time.Second+time.Duration(i)*21*ms_))
		}
	}
	loads = append(loads, load(0, 1, 5*time.Second)) // caching resumed
	res := Check(&Records{TTL: DefaultTTL, Loads: loads})
	mustPass(t, res)
	if res.FailOpen != 200 || res.Leased != 1 {
		t.Errorf("fail-open %d, leased %d; want 200, 1", res.FailOpen, res.Leased)
	}

	// Loads under a lease count however troubled their worker was: its
	// trouble allows one more load (a commit it failed), not a stampede.
	troubled := func(key, worker int, t time.Duration) Load {
		l := load(key, worker, t)
		l.Troubled = true
		return l
	}
	res = Check(&Records{TTL: DefaultTTL, Loads: []Load{troubled(0, 1, time.Second), troubled(0, 1, time.Second+30*ms_)},
		Degraded: []Interval{{Worker: 1, From: 900 * ms_, To: 2 * time.Second}}})
	mustPass(t, res)
	if res.Leased != 2 || res.FailOpen != 0 {
		t.Errorf("leased %d, fail-open %d; want 2, 0: Troubled is no sign of a fail-open load", res.Leased, res.FailOpen)
	}
	loads = []Load{troubled(0, 1, time.Second)}
	for w := 2; w <= 4; w++ {
		loads = append(loads, load(0, w, time.Second+time.Duration(w)*ms_))
	}
	mustFind(t, Check(&Records{TTL: DefaultTTL, Loads: loads}), InvLoads, "key k0: 4 loads started within 4ms (less than the shortest soft TTL), at most 2 allowed (1 + 0 deletes, 0 Redis restarts, 0 takeovers, 1 degraded workers): w1@1.000s")

	// Without coalescing, every caller of a worker loads at once.
	loads = nil
	for range 5 {
		loads = append(loads, failOpenLoad(2, 3, time.Second))
	}
	mustFind(t, Check(&Records{TTL: DefaultTTL, Loads: loads}), InvLoads, "worker 3 ran 4 loads of key k2 at once (at most 3 allowed")
}

// restart is a Redis restart that went down at down for the default
// downtime.
func restart(down time.Duration) Outage { return Outage{Down: down, Up: down + DefaultRedisDowntime} }

// Invariant 5: each worker may fail open twice per key per Redis restart;
// fail-open loads outside every restart's window are not its concern.
func TestCheckFailOpenPerRestart(t *testing.T) {
	restarts := []Outage{restart(time.Second), restart(5 * time.Second)}
	var loads []Load
	var calls []Call
	for _, o := range restarts {
		for w := 1; w <= 3; w++ {
			for key := range 2 {
				loads = append(loads, failOpenLoad(key, w, o.Down+time.Duration(w)*ms_),
					failOpenLoad(key, w, o.Up+RecoveryGrace-time.Duration(w)*ms_))
				calls = append(calls, Call{Key: key, Worker: w, Start: o.Down, End: o.Down + 21*ms_, Version: 1})
			}
		}
	}
	// Worker 4 served k0 from memory throughout the first restart.
	calls = append(calls, Call{Key: 0, Worker: 4, Start: 1100 * ms_, End: 1101 * ms_, Version: 1})
	// Before the first restart, and after its grace: not counted.
	for i := range 10 {
		loads = append(loads, failOpenLoad(0, 1, 100*ms_+time.Duration(i)*30*ms_),
			failOpenLoad(0, 1, restarts[0].Up+RecoveryGrace+ms_+time.Duration(i)*30*ms_))
	}
	r := &Records{TTL: DefaultTTL, Loads: loads, Calls: calls, Outages: restarts}
	res := Check(r)
	mustPass(t, res)
	// 12 workers and keys (3 x 2 x 2 restarts) with 2 loads each, and
	// worker 4's k0 with none.
	if res.OutageLoads != 24 || res.OutageMax != 2 || res.OutageMean != 24.0/13 {
		t.Errorf("outage loads %d, max %d, mean %v; want 24, 2, %v", res.OutageLoads, res.OutageMax, res.OutageMean, 24.0/13)
	}

	r.Loads = append(r.Loads, failOpenLoad(1, 2, 5200*ms_))
	res = Check(r)
	mustFind(t, res, InvOutage, "worker 2: 3 fail-open loads of key k1 in Redis restart 2 (down t=5.000s, up t=5.500s, counted until t=6.150s), at most 2 allowed: 5.002s 5.200s 6.148s")
	if vs := only(res, InvOutage); len(vs) != 1 || vs[0].Worker != 2 || vs[0].Key != 1 || vs[0].At != 6148*ms_ {
		t.Errorf("want one violation of invariant 5, by worker 2 of k1 at its third load (6.148s), got %v", vs)
	}
	if res.OutageMax != 3 {
		t.Errorf("outage max %d, want 3", res.OutageMax)
	}
}

// A load RecoveryGrace after Up still counts for the restart; one later does
// not.
func TestCheckFailOpenPerRestartGrace(t *testing.T) {
	o := restart(time.Second)
	for _, tc := range []struct {
		last time.Duration
		want bool // a violation
	}{
		{o.Up + RecoveryGrace, true},
		{o.Up + RecoveryGrace + 1, false},
	} {
		r := &Records{TTL: DefaultTTL, Outages: []Outage{o},
			Loads: []Load{failOpenLoad(0, 1, o.Down), failOpenLoad(0, 1, o.Up), failOpenLoad(0, 1, tc.last)}}
		res := Check(r)
		if !tc.want {
			mustPass(t, res)
			continue
		}
		mustFind(t, res, InvOutage, "worker 1: 3 fail-open loads of key k0 in Redis restart 1")
	}
}

// Restarts whose windows overlap: a load counts for the latest restart
// that went down before it, once; neither window lends the other its
// allowance.
func TestCheckFailOpenPerRestartOverlap(t *testing.T) {
	a, b := restart(time.Second), restart(2*time.Second) // a's window would run to 2.15s
	check := func(starts ...time.Duration) Result {
		var loads []Load
		for _, s := range starts {
			loads = append(loads, failOpenLoad(0, 1, s))
		}
		return Check(&Records{TTL: DefaultTTL, Loads: loads, Outages: []Outage{b, a}})
	}
	// Counted twice, a would have 4 loads.
	res := check(1000*ms_, 1900*ms_, 2000*ms_, 2600*ms_)
	mustPass(t, res)
	if res.OutageLoads != 4 || res.OutageMax != 2 {
		t.Errorf("outage loads %d, max %d; want 4, 2", res.OutageLoads, res.OutageMax)
	}
	mustFind(t, check(1000*ms_, 2000*ms_, 2100*ms_, 2600*ms_), InvOutage,
		"worker 1: 3 fail-open loads of key k0 in Redis restart 2 (down t=2.000s, up t=2.500s, counted until t=3.150s)")
	mustFind(t, check(1000*ms_, 1500*ms_, 1990*ms_, 2600*ms_), InvOutage,
		"worker 1: 3 fail-open loads of key k0 in Redis restart 1 (down t=1.000s, up t=1.500s, counted until t=2.000s)")
}

// Invariant 5 counts the loads that corral called failing open, and only
// those: a load under a lease does not count, however troubled its worker
// (the Troubled tag, a degraded interval) was as it began; the leased
// loads right after Redis came back are such loads.
func TestCheckFailOpenPerRestartPrecise(t *testing.T) {
	o := restart(time.Second)
	troubled := func(t time.Duration) Load {
		l := load(0, 1, t)
		l.Troubled = true
		return l
	}
	// Two fail-open loads, then leased ones (one per soft TTL, as Redis
	// is back) that the worker's recent trouble covers.
	loads := []Load{failOpenLoad(0, 1, o.Down+20*ms_), failOpenLoad(0, 1, o.Down+540*ms_),
		troubled(o.Up + 60*ms_), troubled(o.Up + 560*ms_)}
	r := &Records{TTL: DefaultTTL, Loads: loads, Outages: []Outage{o},
		Degraded: []Interval{{Worker: 1, From: o.Down, To: o.Up + time.Second}}}
	res := Check(r)
	mustPass(t, res)
	if res.OutageLoads != 2 || res.OutageMax != 2 || res.FailOpen != 2 || res.Leased != 2 {
		t.Errorf("outage loads %d, max %d, fail-open %d, leased %d; want 2, 2, 2, 2", res.OutageLoads, res.OutageMax, res.FailOpen, res.Leased)
	}
	// A third fail-open load in the window is one too many.
	r.Loads = append(r.Loads, failOpenLoad(0, 1, o.Up+100*ms_))
	mustFind(t, Check(r), InvOutage, "worker 1: 3 fail-open loads of key k0 in Redis restart 1")
}

// A restart that kept Redis down longer allows one more fail-open load per
// value's hold (heldFor: the TTL here) beyond the first; fail-open loads
// outside every window are counted, not judged.
func TestCheckFailOpenPerRestartLongRestart(t *testing.T) {
	o := Outage{Down: time.Second, Up: 2600 * ms_} // down 1.6s: 1 + (1.6s + 150ms) / 500ms = 4
	var loads []Load
	for i := range 4 {
		loads = append(loads, failOpenLoad(0, 1, o.Down+time.Duration(i)*520*ms_))
	}
	loads = append(loads, failOpenLoad(0, 1, 5*time.Second), failOpenLoad(0, 1, 5100*ms_)) // a stall, later
	r := &Records{TTL: DefaultTTL, Loads: loads, Outages: []Outage{o, restart(10 * time.Second)}}
	res := Check(r)
	mustPass(t, res)
	if res.LongRestarts != 1 || res.LongestDown != 1600*ms_ || res.OutageMax != 4 || res.FailOpenOutside != 2 {
		t.Errorf("long restarts %d, longest down %v, max %d, outside %d; want 1, 1.6s, 4, 2",
			res.LongRestarts, res.LongestDown, res.OutageMax, res.FailOpenOutside)
	}
	r.Loads = append(r.Loads, failOpenLoad(0, 1, o.Up+200*ms_))
	mustFind(t, Check(r), InvOutage, "worker 1: 5 fail-open loads of key k0 in Redis restart 1 (down t=1.000s, up t=2.600s, counted until t=3.250s), at most 4 allowed")
}

// The report says how soon after each restart's Up the workers' breakers
// closed, from what the workers reported; a violation of invariant 5 says
// what the worker's breaker did.
func TestCheckRecovery(t *testing.T) {
	o := restart(time.Second) // up at 1.5s
	bk := func(w int, at time.Duration, s corral.EventKind) Breaker { return Breaker{Worker: w, At: at, State: s} }
	r := &Records{TTL: DefaultTTL, Outages: []Outage{o}, Breakers: []Breaker{
		bk(1, 1010*ms_, corral.EventBreakerOpen), bk(1, 1010*ms_, corral.EventBreakerOpen),
		bk(1, 1540*ms_, corral.EventBreakerHalfOpen), bk(1, 1541*ms_, corral.EventBreakerClosed),
		bk(2, 1020*ms_, corral.EventBreakerOpen), bk(2, 1480*ms_, corral.EventBreakerClosed), // before Up: 0
		bk(3, 1030*ms_, corral.EventBreakerOpen), bk(3, 1600*ms_, corral.EventBreakerClosed),
		bk(3, 1700*ms_, corral.EventBreakerOpen), bk(3, 1800*ms_, corral.EventBreakerClosed), // reopened: its last
		// Worker 4 was killed: its close was not reported.
		bk(4, 1040*ms_, corral.EventBreakerOpen),
		bk(5, 200*ms_, corral.EventBreakerOpen), bk(5, 300*ms_, corral.EventBreakerClosed), // before the restart
	}}
	res := Check(r)
	if res.Recoveries != 3 || res.RecoveryMax != 300*ms_ || res.RecoveryMean != (41+0+300)*ms_/3 {
		t.Errorf("recoveries %d, max %v, mean %v; want 3, 300ms, %v", res.Recoveries, res.RecoveryMax, res.RecoveryMean, (41+0+300)*ms_/3)
	}
	r.Loads = []Load{failOpenLoad(0, 1, 1020*ms_), failOpenLoad(0, 1, 1300*ms_), failOpenLoad(0, 1, 1530*ms_)}
	mustFind(t, Check(r), InvOutage,
		"at most 2 allowed: 1.020s 1.300s 1.530s; worker 1's breaker open since t=1.010s, half-open at t=1.540s (failures in a row had opened it), closed at t=1.541s")
}

func TestCheckStaleAfterDelete(t *testing.T) {
	del := Delete{Key: 0, Version: 2, Start: 1990 * ms_, End: 2 * time.Second}
	call := func(worker int, start, end time.Duration, v int64) Call {
		return Call{Key: 0, Worker: worker, Start: start, End: end, Version: v}
	}
	for _, tc := range []struct {
		name   string
		calls  []Call
		want   string // "" for no violation
		joined int
	}{
		{"new version", []Call{call(1, 2100*ms_, 2120*ms_, 2)}, "", 0},
		{"before the delete", []Call{call(1, 1900*ms_, 2100*ms_, 1)}, "", 0},
		{"stale read", []Call{call(1, 2100*ms_, 2120*ms_, 1)},
			"worker 1: Fetch of k0 started at t=2.100s, after the Delete that returned at t=2.000s (version now 2), and returned version 1", 0},
		{"long after", []Call{call(1, 5*time.Second, 5*time.Second+ms_, 1)}, "and returned version 1", 0},
		{"joined a flight begun before", []Call{call(1, 1995*ms_, 2120*ms_, 1), call(1, 2100*ms_, 2120*ms_, 1)}, "", 1},
		{"that flight was another worker's", []Call{call(2, 1995*ms_, 2120*ms_, 1), call(1, 2100*ms_, 2120*ms_, 1)}, "worker 1: Fetch of k0", 0},
		{"that flight had ended", []Call{call(1, 1995*ms_, 2050*ms_, 1), call(1, 2100*ms_, 2120*ms_, 1)}, "worker 1: Fetch of k0", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(&Records{TTL: DefaultTTL, Calls: tc.calls, Deletes: []Delete{del}})
			if tc.want == "" {
				mustPass(t, res)
			} else {
				mustFind(t, res, InvStale, tc.want)
			}
			if res.StaleJoined != tc.joined {
				t.Errorf("StaleJoined = %d, want %d", res.StaleJoined, tc.joined)
			}
		})
	}
	// A Delete that failed promises nothing.
	failed := del
	failed.Err = "corral: Redis unavailable"
	mustPass(t, Check(&Records{TTL: DefaultTTL, Deletes: []Delete{failed},
		Calls: []Call{call(1, 2100*ms_, 2120*ms_, 1)}}))
}

// A stale value answered from memory (fail-safe) while its worker could
// not use Redis around a restart is fail-safe's trade-off: counted, not a
// violation, when it is what a fail-open load of the worker returned within
// the value's hold. Outside every restart's window, or with a value no
// such load returned, it is a violation; and a stale value that was not
// answered from memory is judged as before, in the window too.
func TestCheckStaleFailSafe(t *testing.T) {
	o := restart(time.Second) // down 1s, up 1.5s: the window runs to 2.15s
	// Worker 1 failed open at 1.4s (version 1), the orchestrator's Delete
	// returned at 1.55s, Redis back; worker 1's breaker still tripped.
	held := failOpenLoad(0, 1, 1400*ms_) // ends at 1.421s
	late := failOpenLoad(0, 1, 1530*ms_) // read version 1 before the bump, ended at 1.551s
	del := Delete{Key: 0, Version: 2, Start: 1540 * ms_, End: 1550 * ms_}
	fs := func(worker int, start time.Duration, v int64) Call {
		return Call{Key: 0, Worker: worker, Start: start, End: start + ms_, Version: v, Outcome: corral.EventFailSafe}
	}
	for _, tc := range []struct {
		name  string
		loads []Load
		call  Call
		want  string // "" for no violation
		count int    // StaleFailSafe
	}{
		{"in the window", []Load{held}, fs(1, 1600*ms_, 1), "", 1},
		{"at the window's end", []Load{late}, fs(1, o.Up+RecoveryGrace-ms_, 1), "", 1},
		{"past the window", []Load{late}, fs(1, o.Up+RecoveryGrace+ms_, 1),
			"worker 1: Fetch of k0 [2.151s, 2.152s] was answered from memory (fail-safe) with version 1, after the Delete that returned at t=1.550s (version now 2), outside every Redis restart's window (down to 650ms after up), its breaker closed", 0},
		{"long after", []Load{held}, fs(1, 5*time.Second, 1), "outside every Redis restart's window", 0},
		{"no fail-open load of it", nil, fs(1, 1600*ms_, 1),
			"in Redis restart 1 (down t=1.000s, up t=1.500s), but no fail-open load of the worker returned that version in the 600ms before", 0},
		{"another worker's load", []Load{failOpenLoad(0, 2, 1400*ms_)}, fs(1, 1600*ms_, 1), "no fail-open load of the worker", 0},
		{"a leased load", []Load{load(0, 1, 1400*ms_)}, fs(1, 1600*ms_, 1), "no fail-open load of the worker", 0},
		{"held too long", []Load{held}, fs(1, held.End+600*ms_+ms_, 1), "no fail-open load of the worker", 0},
		{"not from memory", []Load{held}, Call{Key: 0, Worker: 1, Start: 1600 * ms_, End: 1601 * ms_, Version: 1, Outcome: corral.EventHit},
			"worker 1: Fetch of k0 started at t=1.600s, after the Delete that returned at t=1.550s (version now 2), and returned version 1 (outcome hit)", 0},
		{"from memory, fresh", []Load{failOpenLoad(0, 1, 1560*ms_)}, fs(1, 1600*ms_, 2), "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(&Records{TTL: DefaultTTL, Loads: tc.loads, Calls: []Call{tc.call}, Deletes: []Delete{del}, Outages: []Outage{o},
				Breakers: []Breaker{{Worker: 1, At: 1010 * ms_, State: corral.EventBreakerOpen},
					{Worker: 1, At: 2100 * ms_, State: corral.EventBreakerClosed}}})
			if tc.want == "" {
				mustPass(t, res)
			} else {
				mustFind(t, res, InvStale, tc.want)
			}
			if res.StaleFailSafe != tc.count || len(res.StaleFailSafeExamples) != tc.count {
				t.Errorf("StaleFailSafe = %d (examples %q), want %d", res.StaleFailSafe, res.StaleFailSafeExamples, tc.count)
			}
		})
	}
	// Outside a restart, the worker's own breaker open (a stall): what its
	// fail-open load returned may be served; a violation says what the
	// breaker did.
	stalled := []Breaker{{Worker: 1, At: 4900 * ms_, State: corral.EventBreakerOpen}, {Worker: 1, At: 5400 * ms_, State: corral.EventBreakerClosed}}
	res := Check(&Records{TTL: DefaultTTL, Loads: []Load{failOpenLoad(0, 1, 4950*ms_)}, Calls: []Call{fs(1, 5*time.Second, 1)},
		Deletes: []Delete{del}, Outages: []Outage{o}, Breakers: stalled})
	mustPass(t, res)
	if res.StaleFailSafe != 1 || !strings.Contains(res.StaleFailSafeExamples[0], "while its worker's breaker was open") {
		t.Errorf("StaleFailSafe = %d (examples %q), want 1 while the breaker was open", res.StaleFailSafe, res.StaleFailSafeExamples)
	}
	res = Check(&Records{TTL: DefaultTTL, Calls: []Call{fs(1, 5*time.Second, 1)}, Deletes: []Delete{del}, Outages: []Outage{o}, Breakers: stalled})
	mustFind(t, res, InvStale, "while its worker's breaker was open, but no fail-open load of the worker returned that version in the 600ms before; worker 1's breaker open since t=4.900s, closed at t=5.400s")
}

func TestCheckLateCall(t *testing.T) {
	res := Check(&Records{TTL: DefaultTTL, Calls: []Call{
		{Key: 4, Worker: 2, Start: time.Second, End: time.Second + Deadline + DeadlineSlack, Version: 1}, // just in time
		{Key: 4, Worker: 2, Start: time.Second, End: time.Second + 2500*ms_, Err: "context deadline exceeded"},
	}})
	mustFind(t, res, InvDeadline, "worker 2: Fetch of k4 took 2.5s, past its 2s deadline + 100ms")
	if n := len(only(res, InvDeadline)); n != 1 {
		t.Errorf("%d deadline violations, want 1", n)
	}
}

func TestCheckErrors(t *testing.T) {
	res := Check(&Records{TTL: DefaultTTL,
		Calls:    []Call{{Key: 1, Worker: 3, Start: time.Second, End: time.Second + 5*ms_, Err: "corral: remote load failed"}},
		Failures: []Failure{{Worker: 5, At: 3 * time.Second, Msg: "exited by itself: exit status 2"}},
	})
	mustFind(t, res, InvError, "worker 3: Fetch of k1 failed after 5ms: corral: remote load failed")
	mustFind(t, res, InvError, "worker 5: exited by itself: exit status 2")
}

func TestViolationString(t *testing.T) {
	v := Violation{Invariant: InvStale, Key: 1, Worker: 2, At: 1500 * ms_, Msg: "m"}
	if got, want := v.String(), "violation of invariant 2 (stale after delete) at t=1.500s: m"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
