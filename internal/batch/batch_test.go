package batch

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

var (
	errExited   = errors.New("exited")
	errClosed   = errors.New("closed")
	errNotFound = errors.New("not found")
)

type panicked struct {
	v     any
	stack []byte
}

func (p *panicked) Error() string { return "panicked" }

// calls is a Config.Call that records the keys of each call and answers
// with answer.
type calls struct {
	mu     sync.Mutex
	keys   [][]string
	answer func(keys []string) (map[string][]byte, map[string]error, error)
}

func (c *calls) call(_ context.Context, keys []string) (map[string][]byte, map[string]error, error) {
	c.mu.Lock()
	c.keys = append(c.keys, slices.Clone(keys))
	c.mu.Unlock()
	return c.answer(keys)
}

func (c *calls) got() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.keys)
}

func newBatch(c *calls, start func(func()) bool) *Batch {
	if start == nil {
		start = func(task func()) bool { go task(); return true }
	}
	return New(Config{
		Call: c.call, Start: start,
		Panicked: func(v any, stack []byte) error { return &panicked{v, stack} },
		Exited:   errExited, Closed: errClosed, NotFound: errNotFound,
	})
}

type result struct {
	v   []byte
	err error
}

// load runs key's loader in a goroutine, and returns its result's channel.
func load(ctx context.Context, b *Batch, key string) <-chan result {
	ch := make(chan result, 1)
	f := b.Loader(key)
	go func() {
		v, err := f(ctx)
		ch <- result{v, err}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the loader did not return")
		return result{}
	}
}

func found(keys []string) (map[string][]byte, map[string]error, error) {
	vals := map[string][]byte{}
	for _, k := range keys {
		if k != "missing" {
			vals[k] = []byte("v-" + k)
		}
	}
	return vals, nil, nil
}

// One round calls loadMany once for every key whose flight asked, once no
// flight is undecided and the owner started them all; a key it did not
// return is NotFound.
func TestOneRoundForTheKeysThatAsked(t *testing.T) {
	c := &calls{answer: found}
	b := newBatch(c, nil)
	for _, k := range []string{"a", "b", "missing", "elsewhere"} {
		b.Expect(context.Background(), k)
	}
	ra, rb, rm := load(t.Context(), b, "a"), load(t.Context(), b, "b"), load(t.Context(), b, "missing")
	b.Decided("elsewhere")
	b.Decided("elsewhere") // more than once is fine
	b.Started()
	if r := wait(t, ra); string(r.v) != "v-a" || r.err != nil {
		t.Errorf("a: %q, %v", r.v, r.err)
	}
	if r := wait(t, rb); string(r.v) != "v-b" || r.err != nil {
		t.Errorf("b: %q, %v", r.v, r.err)
	}
	if r := wait(t, rm); r.v != nil || !errors.Is(r.err, errNotFound) {
		t.Errorf("missing: %q, %v; want NotFound", r.v, r.err)
	}
	got := c.got()
	if len(got) != 1 {
		t.Fatalf("%d calls, want 1: %q", len(got), got)
	}
	slices.Sort(got[0])
	if want := []string{"a", "b", "missing"}; !slices.Equal(got[0], want) {
		t.Errorf("call of %q, want %q", got[0], want)
	}
}

// No call is made while the owner is starting flights, or a flight is
// undecided: the call starts from the Started or Decided that ends them.
func TestNoCallBeforeEveryFlightDecided(t *testing.T) {
	c := &calls{answer: found}
	starts := 0
	b := newBatch(c, func(task func()) bool {
		starts++
		go task()
		return true
	})
	b.Expect(context.Background(), "a")
	b.Expect(context.Background(), "b")
	r, _, _ := b.enlist("a")
	if starts != 0 {
		t.Fatal("a call started while the owner was starting flights")
	}
	b.Started()
	if starts != 0 {
		t.Fatal("a call started while b was undecided")
	}
	b.Decider("b")()
	if starts != 1 {
		t.Fatalf("%d calls started once every flight decided, want 1", starts)
	}
	<-r.done
	if v, err := b.result(r, "a"); string(v) != "v-a" || err != nil {
		t.Errorf("a: %q, %v", v, err)
	}
	if got := c.got(); len(got) != 1 || !slices.Equal(got[0], []string{"a"}) {
		t.Errorf("calls %q, want [[a]]", got)
	}
}

// A flight that asks once the round is gone (a lease taken over later)
// gets a call of its own.
func TestLateKeyGetsItsOwnCall(t *testing.T) {
	c := &calls{answer: found}
	b := newBatch(c, nil)
	b.Expect(context.Background(), "a")
	ra := load(t.Context(), b, "a")
	b.Started()
	wait(t, ra)
	if r := wait(t, load(t.Context(), b, "late")); string(r.v) != "v-late" {
		t.Errorf("late: %q, %v", r.v, r.err)
	}
	if got := c.got(); len(got) != 2 || !slices.Equal(got[1], []string{"late"}) {
		t.Errorf("calls %q, want [[a] [late]]", got)
	}
}

// A call's error fails every key of it; a key's own failure fails it
// alone, and its own failure outranks its value.
func TestErrorsOfACall(t *testing.T) {
	errAll, errOwn := errors.New("all"), errors.New("own")
	c := &calls{answer: func(keys []string) (map[string][]byte, map[string]error, error) {
		if slices.Contains(keys, "fail-all") {
			return map[string][]byte{"fail-all": []byte("x")}, nil, errAll
		}
		return map[string][]byte{"ok": []byte("v"), "own": []byte("x")}, map[string]error{"own": errOwn}, nil
	}}
	b := newBatch(c, nil)
	b.Expect(context.Background(), "ok")
	b.Expect(context.Background(), "own")
	rok, rown := load(t.Context(), b, "ok"), load(t.Context(), b, "own")
	b.Started()
	if r := wait(t, rok); string(r.v) != "v" || r.err != nil {
		t.Errorf("ok: %q, %v", r.v, r.err)
	}
	if r := wait(t, rown); r.v != nil || !errors.Is(r.err, errOwn) {
		t.Errorf("own: %q, %v; want its own error", r.v, r.err)
	}
	if r := wait(t, load(t.Context(), b, "fail-all")); r.v != nil || !errors.Is(r.err, errAll) {
		t.Errorf("fail-all: %q, %v; want the call's error", r.v, r.err)
	}
}

// A panic in a call fails every key of it with Panicked's error, with the
// panicking goroutine's stack; runtime.Goexit with Exited.
func TestPanicAndGoexit(t *testing.T) {
	c := &calls{answer: func(keys []string) (map[string][]byte, map[string]error, error) {
		if keys[0] == "exit" {
			runtime.Goexit()
		}
		panic("boom")
	}}
	b := newBatch(c, nil)
	b.Expect(context.Background(), "p1")
	b.Expect(context.Background(), "p2")
	r1, r2 := load(t.Context(), b, "p1"), load(t.Context(), b, "p2")
	b.Started()
	for _, ch := range []<-chan result{r1, r2} {
		r := wait(t, ch)
		var p *panicked
		if !errors.As(r.err, &p) || p.v != "boom" || len(p.stack) == 0 {
			t.Errorf("%q, %v; want Panicked's error with the value and a stack", r.v, r.err)
		}
	}
	if r := wait(t, load(t.Context(), b, "exit")); !errors.Is(r.err, errExited) {
		t.Errorf("exit: %q, %v; want Exited", r.v, r.err)
	}
}

// A round that cannot start (the owner is closed) fails with Closed.
func TestClosedOwner(t *testing.T) {
	c := &calls{answer: found}
	b := newBatch(c, func(func()) bool { return false })
	b.Expect(context.Background(), "a")
	ra := load(t.Context(), b, "a")
	b.Started()
	if r := wait(t, ra); !errors.Is(r.err, errClosed) {
		t.Errorf("%q, %v; want Closed", r.v, r.err)
	}
	if got := c.got(); len(got) != 0 {
		t.Errorf("calls %q, want none", got)
	}
}

// The loader's context bounds its wait: ended before it starts, it does
// not enlist; ended while it waits, it returns the context's error.
func TestLoaderContext(t *testing.T) {
	calling, release := make(chan struct{}), make(chan struct{})
	c := &calls{answer: func(keys []string) (map[string][]byte, map[string]error, error) {
		close(calling)
		<-release
		return found(keys)
	}}
	b := newBatch(c, nil)
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	b.Expect(context.Background(), "gone")
	if r := wait(t, load(ended, b, "gone")); !errors.Is(r.err, context.Canceled) {
		t.Errorf("gone: %q, %v; want context.Canceled", r.v, r.err)
	}
	b.Decided("gone")
	ctx, cancel := context.WithCancel(t.Context())
	b.Expect(context.Background(), "a")
	ra := load(ctx, b, "a")
	b.Started()
	<-calling
	cancel()
	if r := wait(t, ra); !errors.Is(r.err, context.Canceled) {
		t.Errorf("a: %q, %v; want context.Canceled", r.v, r.err)
	}
	close(release)
	if got := c.got(); len(got) != 1 || !slices.Equal(got[0], []string{"a"}) {
		t.Errorf("calls %q, want [[a]]: the loader whose context had ended enlisted", got)
	}
}

// The keys a call gets are its own copy: changing them changes no round.
func TestCallKeysAreACopy(t *testing.T) {
	c := &calls{answer: func(keys []string) (map[string][]byte, map[string]error, error) {
		vals, _, _ := found(keys)
		keys[0] = "changed"
		return vals, nil, nil
	}}
	b := newBatch(c, nil)
	b.Expect(context.Background(), "a")
	ra := load(t.Context(), b, "a")
	b.Started()
	if r := wait(t, ra); string(r.v) != "v-a" {
		t.Errorf("a: %q, %v", r.v, r.err)
	}
}
