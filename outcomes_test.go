package corral_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/internal/redistest"
)

// TestStampedeOutcomes: cold stampedes of n goroutines on each of two
// Caches (each with its own client, as two processes) over a Redis, left
// to race as they will (observetest's script runs one in lockstep): the
// fleet loads each key once, and counts one miss for it; every other call
// is a hit, coalesced or waited; the outcomes add up to the calls, and the
// Observer is told exactly those outcomes.
func TestStampedeOutcomes(t *testing.T) {
	t.Parallel()
	const n, keys = 50, 4
	srv := redistest.Start(t)
	r := newRecorder(t)
	caches := []*corral.Cache{
		newCache(t, srv.Client(), &corral.Options{Prefix: "stampede", Observer: r}),
		newCache(t, srv.Client(), &corral.Options{Prefix: "stampede", Observer: r}),
	}
	var loads atomic.Int32
	for k := range keys {
		key := "cold" + strconv.Itoa(k)
		var started atomic.Int32
		all := make(chan struct{})
		load := func(context.Context) ([]byte, error) {
			loads.Add(1)
			<-all // every call has begun; some may still be on their way to the flight
			return []byte("v"), nil
		}
		var wg sync.WaitGroup
		for i := range 2 * n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if started.Add(1) == 2*n {
					close(all)
				}
				if v, err := caches[i%2].Fetch(context.Background(), key, time.Minute, load); err != nil || string(v) != "v" {
					t.Errorf("Fetch(%q) = %q, %v", key, v, err)
				}
			}()
		}
		wg.Wait()
	}
	var st corral.Stats
	for _, c := range caches {
		s := c.Stats()
		st.Hits += s.Hits
		st.Misses += s.Misses
		st.Coalesced += s.Coalesced
		st.Waited += s.Waited
		st.Loads += s.Loads
		if s.Calls() != s.Hits+s.Misses+s.Coalesced+s.Waited {
			t.Errorf("a Cache's Stats count other outcomes: %+v", s)
		}
	}
	calls := uint64(2 * n * keys)
	if loads.Load() != keys || st.Loads != keys || st.Misses != keys || st.Hits+st.Misses+st.Coalesced+st.Waited != calls {
		t.Fatalf("%d loads run, Stats %+v; want %d loads and misses, and %d calls in all", loads.Load(), st, keys, calls)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	told := r.counts["stampede"]
	if told[corral.EventHit] != st.Hits || told[corral.EventMiss] != st.Misses || told[corral.EventCoalesced] != st.Coalesced ||
		told[corral.EventWaited] != st.Waited {
		t.Fatalf("the Observer was told %v; Stats say %+v", told, st)
	}
	t.Logf("%d calls: %d hits, %d misses, %d coalesced, %d waited", calls, st.Hits, st.Misses, st.Coalesced, st.Waited)
}
