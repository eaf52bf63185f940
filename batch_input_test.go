package corral_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral"
)

// Bad input gets a clear error and loses nothing: the call's own mistakes
// fail it whole; a bad key fails alone, and the others are served.
func TestFetchMany_BadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	var o batchOrigin
	for _, c := range []struct {
		name string
		ctx  context.Context
		ttl  time.Duration
		load func(context.Context, []string) (map[string][]byte, error)
		want error
	}{
		{"nil loadMany", ctx, time.Minute, nil, corral.ErrNilLoader},
		{"zero ttl", ctx, 0, o.load, corral.ErrInvalidTTL},
		{"negative ttl", ctx, -time.Second, o.load, corral.ErrInvalidTTL},
		{"cancelled ctx", cancelled(), time.Minute, o.load, context.Canceled},
	} {
		vals, err := e.c.FetchMany(c.ctx, []string{"bad:a"}, c.ttl, c.load)
		var be *corral.BatchError
		if !errors.Is(err, c.want) || errors.As(err, &be) || vals != nil {
			t.Errorf("%s: %v, %v; want %v alone", c.name, vals, err, c.want)
		}
	}
	var nilCtx context.Context
	for name, call := range map[string]func(){
		"FetchMany": func() { e.c.FetchMany(nilCtx, []string{"bad:a"}, time.Minute, o.load) },
		"typed": func() {
			corral.FetchMany(nilCtx, e.c, []string{"bad:a"}, time.Minute, func(context.Context, []string) (map[string]int, error) { return nil, nil })
		},
	} {
		if got := panicOf(call); got != "corral: nil Context" {
			t.Errorf("%s with a nil context panicked with %v; want \"corral: nil Context\"", name, got)
		}
	}
	for _, keys := range [][]string{nil, {}} {
		if vals, err := e.c.FetchMany(ctx, keys, time.Minute, o.load); err != nil || vals == nil || len(vals) != 0 {
			t.Fatalf("no keys: %v, %v; want an empty map and nil", vals, err)
		}
	}
	if len(o.called()) != 0 {
		t.Fatalf("loadMany called for bad input: %v", o.called())
	}

	// Repeated keys are fetched once; an empty key fails alone; any other
	// bytes make a key.
	odd := []string{"{x}", "}y{", "bin\x00\xff", "ключ", strings.Repeat("k", 1000)}
	keys := append([]string{"dup", "", "dup"}, odd...)
	keys = append(keys, "dup")
	vals, err := e.c.FetchMany(ctx, keys, time.Minute, o.load)
	var be *corral.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 1 || !errors.Is(be.Errs[""], corral.ErrInvalidKey) || !errors.Is(err, corral.ErrInvalidKey) {
		t.Fatalf("an empty key among others: %v", err)
	}
	wantValues(t, vals, append([]string{"dup"}, odd...))
	if calls := o.called(); len(calls) != 1 || !slices.Equal(calls[0], sorted(append([]string{"dup"}, odd...)...)) {
		t.Fatalf("loadMany calls %q; want one, each key once", calls)
	}
	for _, k := range odd {
		if v, err := e.c.Get(ctx, k); err != nil || string(v) != "v:"+k {
			t.Fatalf("Get(%q) = %q, %v", k, v, err)
		}
	}
}

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// What loadMany returns is taken as Fetch takes a loader's value: an empty
// or nil value is a value; a key it was not asked for is ignored.
func TestFetchMany_LoadManysAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	vals, err := e.c.FetchMany(ctx, []string{"ans:nil", "ans:empty"}, time.Minute,
		func(ctx context.Context, missing []string) (map[string][]byte, error) {
			return map[string][]byte{"ans:nil": nil, "ans:empty": {}, "ans:extra": []byte("x")}, nil
		})
	if err != nil || len(vals) != 2 || vals["ans:nil"] == nil || len(vals["ans:nil"]) != 0 || len(vals["ans:empty"]) != 0 {
		t.Fatalf("FetchMany = %q, %v; want two empty values", vals, err)
	}
	for _, k := range []string{"ans:nil", "ans:empty"} {
		if v, err := e.c.Get(ctx, k); err != nil || len(v) != 0 {
			t.Fatalf("Get(%q) = %q, %v; want an empty value", k, v, err)
		}
	}
	if _, err := e.c.Get(ctx, "ans:extra"); !errors.Is(err, corral.ErrMiss) {
		t.Fatalf("a key loadMany was not asked for: Get = %v, want ErrMiss", err)
	}
}

// picky is a value whose encoding fails when Bad is set.
type picky struct {
	N   int
	Bad bool
}

func (p picky) MarshalJSON() ([]byte, error) {
	if p.Bad {
		return nil, errors.New("cannot encode a bad picky")
	}
	return json.Marshal(map[string]int{"N": p.N})
}

// The typed FetchMany encodes with the Codec: a value that does not encode
// fails its key alone; a cached entry that does not decode is reloaded
// once, in a call of its own, and stored anew.
func TestFetchMany_Typed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	if err := e.c.Set(ctx, "typed:0", []byte("not json"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Set(ctx, "typed:1", []byte(`{"N":1}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	var calls [][]string
	load := func(ctx context.Context, missing []string) (map[string]picky, error) {
		calls = append(calls, sorted(missing...)) // loadMany runs once at a time here
		vals := map[string]picky{}
		for _, k := range missing {
			var n int
			fmt.Sscanf(k, "typed:%d", &n)
			vals[k] = picky{N: n, Bad: n == 3}
		}
		return vals, nil
	}
	keys := []string{"typed:0", "typed:1", "typed:2", "typed:3"}
	vals, err := corral.FetchMany(ctx, e.c, keys, time.Minute, load)
	var be *corral.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 1 || !strings.Contains(be.Errs["typed:3"].Error(), "cannot encode a bad picky") {
		t.Fatalf("FetchMany[picky] = %v; want typed:3 alone to fail encoding", err)
	}
	want := map[string]picky{"typed:0": {N: 0}, "typed:1": {N: 1}, "typed:2": {N: 2}}
	if fmt.Sprint(vals) != fmt.Sprint(want) {
		t.Fatalf("values %v, want %v", vals, want)
	}
	if fmt.Sprint(calls) != "[[typed:2 typed:3] [typed:0]]" || e.c.Stats().DecodeFailures != 1 {
		t.Fatalf("loadMany calls %v, %d decode failures; want the misses, then the entry that did not decode", calls, e.c.Stats().DecodeFailures)
	}
	if v, err := e.c.Get(ctx, "typed:0"); err != nil || string(v) != `{"N":0}` {
		t.Fatalf("the reloaded entry: %q, %v", v, err)
	}
	if _, err := corral.FetchMany[picky](ctx, e.c, keys, time.Minute, nil); !errors.Is(err, corral.ErrNilLoader) {
		t.Fatalf("nil loadMany: %v", err)
	}
}
