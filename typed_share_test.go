package corral_test

import (
	"context"
	"encoding/json"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

// sharedRecord is the value of the tests below: about 1 KiB of JSON, with
// a slice, as a service's records are.
type sharedRecord struct {
	ID    int
	Tags  []string
	Notes string
}

var sharedValue = sharedRecord{ID: 7, Tags: []string{"a", "b"}, Notes: strings.Repeat("n", 1000)}

// typedCallers runs n Fetch[sharedRecord] of key on c at once, released
// together, and checks every answer once every caller has one.
func typedCallers(t *testing.T, c *corral.Cache, key string, n int, load func(context.Context) (sharedRecord, error)) {
	t.Helper()
	got, errs := make([]sharedRecord, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got[i], errs[i] = corral.Fetch(ctx, c, key, time.Hour, load)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		} else if !reflect.DeepEqual(got[i], sharedValue) {
			t.Errorf("caller %d got %+v", i, got[i])
		}
	}
}

// fewDecodes is how many of n callers answered together may decode the
// value: the first decode is not kept (most answers have one caller), and
// callers woken together on every processor may decode at once before the
// second is kept; one each is what the tests below rule out.
func fewDecodes(n int) int32 { return int32(min(n/2, 4*runtime.GOMAXPROCS(0)+4)) }

// The waiters of a Fetch[T] stampede take the value decoded once, not
// each their own decode: 2,000 callers decoding 1 KiB of JSON each kept
// 2 cores busy for 22 ms after the load (BenchmarkTypedStampede). Here 300
// callers wait for one load, with and without a near cache (whose callers
// wait in another path); the codec counts the decodes (fewDecodes).
func TestTypedFetch_StampedeDecodesOnce(t *testing.T) {
	t.Parallel()
	for _, near := range []bool{false, true} {
		t.Run(map[bool]string{false: "Redis", true: "near cache"}[near], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			codec := &countingCodec{}
			opts := &corral.Options{Codec: codec}
			if near {
				opts = nearOpts()
				opts.Codec = codec
			}
			c := newCache(t, e.srv.Client(), opts)
			const n = 300
			gate := make(chan struct{})
			load := func(context.Context) (sharedRecord, error) {
				<-gate
				return sharedValue, nil
			}
			decodedOnce(t, c, codec, n, load, func() bool { return c.Stats().Joined == n-1 }, func() { close(gate) })
		})
	}
}

// decodedOnce runs n typed callers of "k" on c (load for a miss), lets them
// be answered with release once joined says every one of them waits, and
// checks how often the codec decoded (fewDecodes).
func decodedOnce(t *testing.T, c *corral.Cache, codec *countingCodec, n int, load func(context.Context) (sharedRecord, error), joined func() bool, release func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		typedCallers(t, c, "k", n, load)
	}()
	eventually(t, 10*time.Second, "every caller joined", joined)
	release()
	<-done
	if d := codec.decodes.Load(); d > fewDecodes(n) {
		t.Fatalf("%d callers decoded the value %d times; want at most %d", n, d, fewDecodes(n))
	} else {
		t.Logf("%d callers, %d decodes", n, d)
	}
}

// The same for the joiners of a peek of a warm key (a hot key's concurrent
// hits): its reply's value is decoded once for them.
func TestTypedFetch_PeekJoinersDecodeOnce(t *testing.T) {
	t.Parallel()
	raw, err := json.Marshal(sharedValue)
	if err != nil {
		t.Fatal(err)
	}
	codec := &countingCodec{}
	store := func(context.Context) ([]byte, error) { return raw, nil }
	c, held, release := heldPeek(t, &corral.Options{Codec: codec}, "k", store, sharedValue.Notes)
	const n = 300
	load := func(context.Context) (sharedRecord, error) {
		t.Error("a warm key was loaded")
		return sharedRecord{}, nil
	}
	joined := func() bool {
		select {
		case <-held: // the peek's reply is held back
			return corral.PeekCallers(c, "k") == n
		default:
			return false
		}
	}
	decodedOnce(t, c, codec, n, load, joined, release)
}

// Callers of one load that ask for it as different types each get their
// own type's value: a value decoded as one type is never handed out as
// another.
func TestTypedFetch_SharedDecodeKeepsTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := newCache(t, e.srv.Client(), nil)
	const n = 100
	gate := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if i%2 == 0 {
				v, err := corral.Fetch(ctx, c, "k", time.Hour, func(context.Context) (sharedRecord, error) {
					<-gate
					return sharedValue, nil
				})
				if err == nil && !reflect.DeepEqual(v, sharedValue) {
					t.Errorf("as a record: %+v", v)
				}
				errs[i] = err
				return
			}
			m, err := corral.Fetch(ctx, c, "k", time.Hour, func(context.Context) (map[string]any, error) {
				<-gate
				return map[string]any{"ID": 7.0, "Tags": []any{"a", "b"}, "Notes": sharedValue.Notes}, nil
			})
			if err == nil && (m["ID"] != 7.0 || m["Notes"] != sharedValue.Notes) {
				t.Errorf("as a map: %v", m)
			}
			errs[i] = err
		})
	}
	eventually(t, 10*time.Second, "every caller joined the load", func() bool { return c.Stats().Joined == n-1 })
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
}

// BenchmarkTypedStampede is a stampede of 2,000 callers on one Cache and a
// cold key with a 20 ms origin, with Fetch (bytes) and with Fetch[T] (1 KiB
// of JSON), the latter also with a near cache: p99-after-load-µs is the
// 99th percentile caller's answer after the load returned, which the typed
// callers once spent decoding the value each for itself.
func BenchmarkTypedStampede(b *testing.B) {
	raw, err := json.Marshal(sharedValue)
	if err != nil {
		b.Fatal(err)
	}
	rdb := benchClient(b)
	for _, name := range []string{"bytes", "typed", "typed-near"} {
		b.Run(name, func(b *testing.B) {
			o := &corral.Options{Logger: quiet}
			if name == "typed-near" {
				o.NearCache.Size = 1000
			}
			c := corral.Must(corral.New(rdb, o))
			defer c.Close()
			var after []float64
			for i := range b.N {
				key := "bench:typed-stampede:" + name + ":" + strconv.Itoa(i) + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
				var loaded atomic.Int64
				origin := func() {
					<-time.After(20 * time.Millisecond) // the origin's latency
					loaded.Store(time.Now().UnixNano())
				}
				ends := make([]int64, 2000)
				release := make(chan struct{})
				var wg sync.WaitGroup
				for g := range ends {
					wg.Go(func() {
						<-release
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						var err error
						if name == "bytes" {
							_, err = c.Fetch(ctx, key, time.Minute, func(context.Context) ([]byte, error) { origin(); return raw, nil })
						} else {
							_, err = corral.Fetch(ctx, c, key, time.Minute, func(context.Context) (sharedRecord, error) { origin(); return sharedValue, nil })
						}
						if err != nil {
							b.Error(err)
						}
						ends[g] = time.Now().UnixNano()
					})
				}
				close(release)
				wg.Wait()
				slices.Sort(ends)
				after = append(after, float64(ends[len(ends)*99/100]-loaded.Load())/1e3)
			}
			slices.Sort(after)
			b.ReportMetric(after[len(after)/2], "p99-after-load-µs")
		})
	}
}
