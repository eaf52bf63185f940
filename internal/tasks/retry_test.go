package tasks

import (
	"context"
	"testing"
	"time"
)

func TestRetry(t *testing.T) {
	ctx := context.Background()
	n := 0
	if tries, done, closed := Retry(ctx, time.Now().Add(time.Minute), time.Millisecond, 4*time.Millisecond, func() bool { n++; return n == 3 }); tries != 3 || !done || closed {
		t.Fatalf("Retry = %d tries, done %v, closed %v; want 3, done", tries, done, closed)
	}
	if tries, done, closed := Retry(ctx, time.Now().Add(20*time.Millisecond), time.Millisecond, 2*time.Millisecond, func() bool { return false }); tries == 0 || done || closed {
		t.Fatalf("Retry past its deadline = %d tries, done %v, closed %v; want some tries, not done", tries, done, closed)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if tries, done, closed := Retry(cctx, time.Now().Add(time.Minute), time.Millisecond, time.Millisecond, func() bool { return true }); tries != 0 || done || !closed {
		t.Fatalf("Retry with its context ended = %d tries, done %v, closed %v; want none, closed", tries, done, closed)
	}
}
