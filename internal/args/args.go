// Package args owns what a call's arguments are checked for, and made
// into, without a Cache: a nil context (a panic, as the standard library
// does), an empty key, a ttl that is not positive, a nil loader, a context
// that ended (Errors), and a typed loader made to return its value
// encoded (Encoded).
//
// It may not touch the Cache (whether it is closed, its first-use
// diagnostics: the root checks those), nor the sentinels: the root hands
// its own in (Errors), and every refusal wraps one, so errors.Is and the
// errors' text are the root's.
package args

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/errprefix"
)

// Errors are the root's sentinels that the refusals wrap.
type Errors struct{ InvalidKey, InvalidTTL, NilLoader error }

// Context panics on a nil ctx, a programming error, with a message that
// says so.
func (Errors) Context(ctx context.Context) {
	if ctx == nil {
		panic("corral: nil Context")
	}
}

// Key panics on a nil ctx (Context), and refuses an empty key.
func (e Errors) Key(ctx context.Context, key string) error {
	e.Context(ctx)
	if key == "" {
		return errprefix.Errorf(errprefix.Corral, "%w: empty key", e.InvalidKey)
	}
	return nil
}

// TTL refuses a ttl that is zero or negative.
func (e Errors) TTL(ttl time.Duration) error {
	if ttl <= 0 {
		return errprefix.Errorf(errprefix.Corral, "%w: %v", e.InvalidTTL, ttl)
	}
	return nil
}

// Ready is what every call checks after its key (and ttl): that it has a
// loader, and that its context has not ended.
func (e Errors) Ready(ctx context.Context, nilLoader bool) error {
	if nilLoader {
		return e.NilLoader
	}
	return ctx.Err()
}

// Encoded returns load with its value encoded by marshal: a value that
// does not encode fails the load, with an error that names its type.
func Encoded[T any](load func(context.Context) (T, error), marshal func(any) ([]byte, error)) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err != nil {
			return nil, err
		}
		b, err := marshal(v)
		if err != nil {
			return nil, errprefix.Errorf(errprefix.Corral, "encode %T: %w", v, err)
		}
		return b, nil
	}
}
