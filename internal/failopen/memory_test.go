package failopen

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/near"
)

var errNotFound = errors.New("not found")

// memories returns a Memory of each kind: with the near cache, and with
// Held only.
func memories(t *testing.T) map[string]Memory {
	n, err := near.New(near.Config{Size: 100, TTL: time.Second, SafeTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := near.NewHeld(100, 1<<20)
	t.Cleanup(func() { n.Close(time.Now().Add(time.Second)); h.Close() })
	return map[string]Memory{"near": {Near: n}, "held": {Held: h, Throttle: time.Minute}}
}

// What a fail-open load kept is found, with its duration, and forgotten
// with its key; a negative result is found as its error.
func TestMemory_KeepFindForget(t *testing.T) {
	for name, m := range memories(t) {
		t.Run(name, func(t *testing.T) {
			if _, ok := m.Find("k", true); ok {
				t.Fatal("an empty memory finds a value")
			}
			m.Keep("k", Kept{Val: []byte("v"), Soft: time.Minute, Took: 20 * time.Millisecond}, m.Mark())
			for _, copies := range []bool{true, false} {
				if f, ok := m.Find("k", copies); !ok || string(f.Bytes()) != "v" || f.Decoded || f.Err != nil {
					t.Fatalf("Find(copies %v) = %+v, %v; want the kept value", copies, f, ok)
				}
			}
			if took, ok := m.LastLoad("k"); !ok || took != 20*time.Millisecond {
				t.Fatalf("LastLoad = %v, %v; want 20ms", took, ok)
			}
			m.Keep("gone", Kept{Err: errNotFound, Soft: time.Minute}, m.Mark())
			if f, ok := m.Find("gone", true); !ok || !errors.Is(f.Err, errNotFound) {
				t.Fatalf("Find of a negative result = %+v, %v", f, ok)
			}
			if _, ok := m.LastLoad("gone"); ok {
				t.Fatal("a load of no duration has a last load")
			}
			m.Forget("k")
			if m.Near != nil {
				m.Near.Invalidate("k") // the near cache forgets on its own
			}
			if _, ok := m.Find("k", true); ok {
				t.Fatal("a forgotten key is found")
			}
		})
	}
}

// A result is not kept over an invalidation made during its load, nor past
// its soft expiry.
func TestMemory_KeepAfterInvalidation(t *testing.T) {
	for name, m := range memories(t) {
		t.Run(name, func(t *testing.T) {
			mark := m.Mark()
			m.Forget("k")
			if m.Near != nil {
				m.Near.Invalidate("k")
			}
			m.Keep("k", Kept{Val: []byte("v"), Soft: time.Minute}, mark)
			if _, ok := m.Find("k", true); ok {
				t.Fatal("a result is kept over an invalidation made during its load")
			}
			m.Keep("old", Kept{Val: []byte("v"), Soft: -time.Second}, m.Mark())
			if _, ok := m.Find("old", true); ok {
				t.Fatal("a result past its soft expiry is kept")
			}
		})
	}
}

// Held keeps a value for Throttle at most, and the zero Memory nothing.
func TestMemory_Throttle(t *testing.T) {
	m := Memory{Held: near.NewHeld(10, 1<<10), Throttle: time.Second}
	defer m.Held.Close()
	m.Keep("k", Kept{Val: []byte("v"), Soft: time.Minute}, m.Mark())
	if v, ok := m.Held.Get("k"); !ok || v.Until > near.Clock()+int64(time.Second) {
		t.Fatalf("held %+v, %v; want it for Throttle at most", v, ok)
	}
	var zero Memory
	zero.Keep("k", Kept{Val: []byte("v"), Soft: time.Minute}, zero.Mark())
	zero.Forget("k")
	if _, ok := zero.Find("k", true); ok {
		t.Fatal("the zero Memory holds a value")
	}
}

// A near copy that a typed call decoded is found Decoded, after the bytes,
// and only when copies read from Redis may answer.
func TestMemory_DecodedCopy(t *testing.T) {
	m := memories(t)["near"]
	type T struct{ V int }
	m.Near.Use(reflect.TypeOf(T{}))
	m.Near.Put(near.Key{Key: "k", Type: reflect.TypeOf(T{})}, &near.Entry{Val: T{1}, Soft: near.Clock() + int64(time.Minute)}, m.Near.Snapshot())
	f, ok := m.Find("k", true)
	if !ok || !f.Decoded || f.Val != (T{1}) {
		t.Fatalf("Find = %+v, %v; want the decoded copy", f, ok)
	}
	if _, ok := m.Find("k", false); ok {
		t.Fatal("a copy read from Redis answers where only fail-open results may")
	}
}

func TestWaitAll(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	open := make(chan struct{})
	fired := make(chan time.Time, 1)
	done := func(c *chan struct{}) <-chan struct{} { return *c }
	if WaitAll(context.Background(), []chan struct{}{closed, nil, closed}, nil, done) {
		t.Fatal("calls that ended fired the rescue")
	}
	fired <- time.Now()
	if !WaitAll(context.Background(), []chan struct{}{closed, open}, fired, done) {
		t.Fatal("a call still waiting did not fire the rescue")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if WaitAll(ctx, []chan struct{}{open}, nil, done) {
		t.Fatal("a caller gone fired the rescue")
	}
}
