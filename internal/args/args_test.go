package args

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

var refuse = Errors{
	InvalidKey: errors.New("corral: invalid key"),
	InvalidTTL: errors.New("corral: invalid ttl"),
	NilLoader:  errors.New("corral: nil loader"),
}

// TestRefusals checks each refusal's sentinel and text, and what passes.
func TestRefusals(t *testing.T) {
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		err    error
		target error
		want   string
	}{
		{refuse.Key(ctx, ""), refuse.InvalidKey, "corral: invalid key: empty key"},
		{refuse.TTL(0), refuse.InvalidTTL, "corral: invalid ttl: 0s"},
		{refuse.TTL(-time.Second), refuse.InvalidTTL, "corral: invalid ttl: -1s"},
		{refuse.Ready(ended, true), refuse.NilLoader, "corral: nil loader"},
		{refuse.Ready(ended, false), context.Canceled, "context canceled"},
	} {
		if !errors.Is(tc.err, tc.target) || tc.err.Error() != tc.want {
			t.Errorf("%v; want %q, wrapping %v", tc.err, tc.want, tc.target)
		}
	}
	if err := errors.Join(refuse.Key(ctx, "k"), refuse.TTL(time.Nanosecond), refuse.Ready(ctx, false)); err != nil {
		t.Errorf("good arguments refused: %v", err)
	}
}

// TestNilContextPanics checks that a nil ctx panics, saying so.
func TestNilContextPanics(t *testing.T) {
	defer func() {
		if r := recover(); fmt.Sprint(r) != "corral: nil Context" {
			t.Errorf("recovered %v", r)
		}
	}()
	_ = refuse.Key(nil, "k")
}

// TestEncoded checks that a typed load's value is encoded, its error kept,
// and a value that does not encode named by type.
func TestEncoded(t *testing.T) {
	ctx := context.Background()
	b, err := Encoded(func(context.Context) (int, error) { return 7, nil }, json.Marshal)(ctx)
	if string(b) != "7" || err != nil {
		t.Errorf("Encoded = %q, %v", b, err)
	}
	boom := errors.New("boom")
	if _, err := Encoded(func(context.Context) (int, error) { return 0, boom }, json.Marshal)(ctx); err != boom {
		t.Errorf("Encoded's load error = %v", err)
	}
	var utf *json.UnsupportedTypeError
	_, err = Encoded(func(context.Context) (func(), error) { return func() {}, nil }, json.Marshal)(ctx)
	if !errors.As(err, &utf) || err.Error() != "corral: encode func(): json: unsupported type: func()" {
		t.Errorf("Encoded of a func = %v", err)
	}
}
