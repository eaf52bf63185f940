package corralhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/corralhq/corral"
	"github.com/corralhq/corral/corralhttp"
	"github.com/corralhq/corral/internal/redistest"
)

// TestMissesAreOriginRequests: over two Handlers sharing a Redis (two
// sidecars), stampedes of several URLs, then an invalidation of each (a
// POST the origin accepts) and the stampedes again: X-Cache says MISS
// exactly as often as the origin is asked (a GET), and the Caches' Stats
// agree with the X-Cache values: Misses are the MISSes, the calls
// answered by another request's load (Coalesced, Waited) the COALESCEDs,
// the hits the HITs, and every request is one call.
func TestMissesAreOriginRequests(t *testing.T) {
	const urls, per = 8, 40 // per URL and round, over both Handlers
	srv := redistest.Start(t)
	var gets atomic.Int64
	var mu sync.Mutex
	gate := make(chan struct{}) // guarded by mu: the GETs of a round wait for it
	close(gate)
	o := startOrigin(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.Method == http.MethodGet {
			gets.Add(1)
			mu.Lock()
			g := gate
			mu.Unlock()
			<-g
		}
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "body of "+r.URL.Path)
	})
	hs := []*corralhttp.Handler{newHandler(t, srv, o, nil), newHandler(t, srv, o, nil)}
	xc := map[string]int{} // guarded by mu

	round := func() {
		g := make(chan struct{})
		release := sync.OnceFunc(func() { close(g) })
		t.Cleanup(release) // before the origin closes, should the test fail first
		mu.Lock()
		gate = g
		mu.Unlock()
		before := gets.Load()
		done := make(chan struct{})
		go func() {
			defer close(done)
			parallel(urls*per, func(i int) {
				path := fmt.Sprintf("/u%d", i%urls)
				w := get(t, hs[i%2], path)
				if w.Code != 200 || w.Body.String() != "body of "+path {
					t.Errorf("GET %s: %d %q", path, w.Code, w.Body.String())
				}
				mu.Lock()
				xc[w.Header().Get("X-Cache")]++
				mu.Unlock()
			})
		}()
		// Each URL's one load under way in the fleet; then the origin answers.
		eventually(t, "a load of each URL", func() bool { return gets.Load() == before+urls })
		release()
		<-done
	}
	round()
	for i := range urls {
		if w := do(t, hs[i%2], http.MethodPost, fmt.Sprintf("/u%d", i)); w.Code != 200 {
			t.Fatalf("POST /u%d: %d", i, w.Code)
		}
	}
	round()

	var st corral.Stats
	for _, h := range hs {
		s := h.Stats()
		st.Hits += s.Hits + s.NearHits + s.FailSafeHits
		st.Misses += s.Misses
		st.Coalesced += s.Coalesced + s.Waited
		st.Loads += s.Loads
		st.Errors += s.Errors
		if s.Calls() != s.Hits+s.NearHits+s.FailSafeHits+s.Misses+s.Coalesced+s.Waited {
			t.Errorf("a Cache's Stats count other outcomes: %+v", s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := gets.Load(); n != 2*urls || int64(xc[corralhttp.Miss]) != n || st.Misses != uint64(n) || st.Loads != uint64(n) {
		t.Errorf("origin GETs %d, X-Cache MISS %d, Stats.Misses %d, Stats.Loads %d; want %d each",
			n, xc[corralhttp.Miss], st.Misses, st.Loads, 2*urls)
	}
	if uint64(xc[corralhttp.Coalesced]) != st.Coalesced || uint64(xc[corralhttp.Hit]) != st.Hits || st.Errors != 0 {
		t.Errorf("X-Cache %v; Stats: %d coalesced or waited, %d hits, %d errors", xc, st.Coalesced, st.Hits, st.Errors)
	}
	if xc[corralhttp.Miss]+xc[corralhttp.Coalesced]+xc[corralhttp.Hit] != 2*urls*per {
		t.Errorf("X-Cache %v; want MISS, COALESCED or HIT for each of %d GETs", xc, 2*urls*per)
	}
	t.Logf("X-Cache over %d GETs: %v", 2*urls*per, xc)
}
