package errprefix_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/errprefix"
)

const p = "corral: "

var errSentinel = errors.New("corral: thing failed")

type typed struct{ msg string }

func (e *typed) Error() string { return e.msg }

func TestErrorfSaysThePrefixOnce(t *testing.T) {
	inner := errprefix.Errorf(p, "get %q: %w", "k", errSentinel)
	joined := errors.Join(errprefix.Errorf(p, "%w after 1s", errSentinel), context.DeadlineExceeded)
	both := errors.Join(errSentinel, errprefix.Errorf(p, "renew: %w", io.EOF))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errprefix.Errorf(p, "%w: %v", errSentinel, 3), "corral: thing failed: 3"},
		{errprefix.Errorf(p, "fetch: %w", inner), `corral: fetch: get "k": thing failed`},
		{errprefix.Errorf(p, "peek: %w", joined), "corral: peek: thing failed after 1s\ncontext deadline exceeded"},
		{errprefix.Errorf(p, "many: %w", both), "corral: many: thing failed\nrenew: EOF"},
		{errprefix.Errorf(p, "%w (%v; %w)", errSentinel, inner, io.EOF), `corral: thing failed (get "k": thing failed; EOF)`},
		{errprefix.Errorf(p, "load: %w", &typed{"corral: typed"}), "corral: load: typed"},
		{errprefix.Errorf(p, "plain %d", 1), "corral: plain 1"},
		{errprefix.Wrapf(p, "serve: %w", inner), `serve: get "k": thing failed`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q; want %q", got, tc.want)
		}
		if n := strings.Count(tc.err.Error(), p); n > 1 {
			t.Errorf("%q says %q %d times", tc.err, p, n)
		}
	}
}

func TestErrorfKeepsIdentity(t *testing.T) {
	ctxErr := errors.Join(errSentinel, context.Canceled)
	err := errprefix.Errorf(p, "fetch: %w", errprefix.Errorf(p, "get: %w: %w", ctxErr, &typed{"x"}))
	for _, target := range []error{errSentinel, context.Canceled} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(%q, %v) = false", err, target)
		}
	}
	var ty *typed
	if !errors.As(err, &ty) || ty.msg != "x" {
		t.Errorf("errors.As found %v", ty)
	}
	if errprefix.Trim(p, nil) != nil {
		t.Error("Trim(nil) is not nil")
	}
	once := errprefix.Trim(p, errSentinel)
	if errprefix.Trim(p, once) != once || once.Error() != "thing failed" || !errors.Is(once, errSentinel) {
		t.Errorf("Trim twice: %q", errprefix.Trim(p, once))
	}
	if got := errprefix.TrimText(p, "corral: a\ncorral: b\nc corral: d"); got != "a\nb\nc corral: d" {
		t.Errorf("Text = %q", got)
	}
}

// Attr is a record's "err": the error without the prefix its message says,
// still the same error to errors.Is.
func TestAttr(t *testing.T) {
	base := errors.New("boom")
	a := errprefix.Attr(errprefix.Corral, fmt.Errorf("corral: load: %w", base))
	err, ok := a.Value.Any().(error)
	if a.Key != "err" || !ok || err.Error() != "load: boom" || !errors.Is(err, base) {
		t.Fatalf("Attr = %s=%v; want err=load: boom, still base", a.Key, a.Value)
	}
}
