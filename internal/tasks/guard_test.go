package tasks

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

var errExited = errors.New("exited")

// panicked is Guard's panicked for the tests: the value, as an error.
func panicked(v any, stack []byte) error {
	if len(stack) == 0 {
		return errors.New("no stack")
	}
	return errors.New(v.(string))
}

// A call's result, its panic and its runtime.Goexit each come back as
// Guard's answer.
func TestGuard_Answers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if v, err := Guard(ctx, func() (int, error) { return 7, nil }, panicked, errExited); v != 7 || err != nil {
		t.Fatalf("Guard = %d, %v; want 7, nil", v, err)
	}
	if _, err := Guard(ctx, func() (int, error) { panic("boom") }, panicked, errExited); err == nil || err.Error() != "boom" {
		t.Fatalf("a panic: %v; want panicked's error", err)
	}
	if _, err := Guard(ctx, func() (int, error) { runtime.Goexit(); return 0, nil }, panicked, errExited); err != errExited {
		t.Fatalf("a Goexit: %v; want exited", err)
	}
}

// A call still running when ctx ends is abandoned: Guard returns at once,
// with ctx's error and the zero value.
func TestGuard_AbandonsAtTheContextsEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	v, err := Guard(ctx, func() (int, error) { close(started); <-release; return 7, nil }, panicked, errExited)
	if v != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Guard = %d, %v; want 0, context.Canceled", v, err)
	}
}
