package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
	"github.com/corralhq/corral/internal/testkit"
)

// A worker tags what it reports precisely: a load corral called directly is
// FailOpen (corral.IsFailOpen), one under a lease is not, whatever the
// worker's recent trouble says; a call answered from memory while Redis is
// down has the outcome EventFailSafe, one that failed open EventFailOpen;
// and the breaker's changes are reported as corral told them.
func TestSoakWorkerTagsFailOpenAndFailSafe(t *testing.T) {
	srv := redistest.Start(t)
	epoch := time.Now().Round(0)
	org, err := startOrigin(epoch, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer org.close()
	var out bytes.Buffer // written under the reporter's lock, read once the worker is closed
	w, err := newWorker(workerConfig{ID: 7, RedisURL: srv.URL(), Origin: org.URL(), Prefix: "soak-test-tags",
		Keys: 1, Goroutines: 1, TTL: DefaultTTL, Strategy: StrategyCorral, Epoch: epoch.UnixNano()}, &out)
	if err != nil {
		t.Fatal(err)
	}
	st := new(callState)
	base := context.WithValue(context.Background(), callStateKey{}, st)
	call := func() corral.EventKind {
		w.call(base, st, 0)
		return st.outcome
	}

	if got := call(); got != corral.EventMiss {
		t.Fatalf("first call's outcome %v, want miss", got)
	}
	if got := call(); got != corral.EventHit {
		t.Fatalf("second call's outcome %v, want hit", got)
	}
	srv.Kill()
	// Until the entry's soft TTL runs out, the value held from the
	// fail-open load answers: at least one call fails open, the rest (of
	// the first 200ms) are answered from memory.
	outcomes := map[corral.EventKind]int{}
	pace := time.NewTicker(time.Millisecond) // a call a millisecond for 200 ms: pacing, not synchronisation
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); <-pace.C {
		outcomes[call()]++
	}
	pace.Stop()
	t.Logf("outcomes while Redis is down: %v", outcomes)
	if outcomes[corral.EventFailOpen] < 1 || outcomes[corral.EventFailSafe] < 10 {
		t.Errorf("outcomes while Redis is down: %v; want fail_open at least once, then fail_safe", outcomes)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	recovered := testkit.Within(5*time.Second, time.Millisecond, func() bool {
		out := call()
		return out == corral.EventMiss || out == corral.EventHit
	})
	if !recovered {
		t.Error("no call read Redis within 5s of its restart")
	}
	if err := w.rep.flush(nil); err != nil {
		t.Fatal(err)
	}
	w.close()

	loads := org.close()
	var failOpen, leased int
	for _, l := range loads {
		if l.FailOpen {
			failOpen++
		} else {
			leased++
		}
	}
	if len(loads) < 2 || loads[0].FailOpen || !loads[1].FailOpen || !loads[1].Troubled {
		t.Errorf("loads %+v; want the first under a lease, the second fail-open (and troubled)", loads)
	}
	if leased < 2 || failOpen < 1 {
		t.Errorf("%d leased and %d fail-open loads; want a leased one before Redis went down and after it came back", leased, failOpen)
	}

	var calls [][5]int64
	var breaker [][2]int64
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Bytes(), err)
		}
		calls = append(calls, m.Calls...)
		breaker = append(breaker, m.Breaker...)
	}
	reported := map[corral.EventKind]int{}
	for _, c := range calls {
		reported[corral.EventKind(c[4])]++
	}
	for _, k := range []corral.EventKind{corral.EventMiss, corral.EventHit, corral.EventFailOpen, corral.EventFailSafe} {
		if reported[k] < 1 {
			t.Errorf("the reported calls' outcomes %v lack %v", reported, k)
		}
	}
	if len(breaker) < 2 || corral.EventKind(breaker[0][1]) != corral.EventBreakerOpen ||
		corral.EventKind(breaker[len(breaker)-1][1]) != corral.EventBreakerClosed {
		t.Errorf("breaker changes %v; want it opened, and closed at last", breaker)
	}
}

// A call written before the outcome was reported (4 numbers) still
// decodes, with outcome 0.
func TestSoakMessageReadsCallsWithoutOutcome(t *testing.T) {
	var m message
	if err := json.Unmarshal([]byte(`{"c":[[3,10,20,5]]}`), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Calls) != 1 || m.Calls[0] != [5]int64{3, 10, 20, 5, 0} {
		t.Errorf("calls %v; want [[3 10 20 5 0]]", m.Calls)
	}
}
