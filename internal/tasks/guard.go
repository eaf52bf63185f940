package tasks

import (
	"context"
	"runtime/debug"
)

// Guard runs call in a goroutine of its own, not a Group's, and waits for
// it until ctx ends, so that call can neither hang nor crash its caller: a
// panic in call becomes panicked's error (given the value and the stack),
// and a runtime.Goexit exited. When ctx ends first, call is abandoned, its
// late result dropped: Guard returns the zero T and ctx's error.
func Guard[T any](ctx context.Context, call func() (T, error), panicked func(v any, stack []byte) error, exited error) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		returned := false
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: panicked(p, debug.Stack())}
			} else if !returned {
				done <- result{err: exited}
			}
		}()
		v, err := call()
		returned = true
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}
