package corral

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/args"
	"github.com/corralhq/corral/internal/near"
)

// Fetch is the typed form of Cache.Fetch: values are encoded with the
// Cache's Codec (JSON by default). It returns T's zero value with any error.
// A cached entry that does not decode as T (written by an earlier release,
// say) is taken as missing: it is reloaded once, under the lease as usual,
// and stored anew (Stats.DecodeFailures counts it; a warning is logged once
// per key); a freshly loaded value that does not decode returns the codec's
// error, wrapped. Options.CodecVersion spares a new release from even trying
// to decode old entries. Callers answered together (those that waited for
// one load or one read of the key) share one decode of the value, and with
// the near cache on a copy is kept decoded, per key and per type T, so a
// near hit does not decode again: treat the value returned as read-only, as
// it may be shared with other callers (its slices, maps and pointers).
func Fetch[T any](ctx context.Context, c *Cache, key string, ttl time.Duration, load func(ctx context.Context) (T, error)) (T, error) {
	if c.tracer != nil {
		return fetchTypedTraced(ctx, c, key, ttl, load)
	}
	w := underWay{ttl: ttl}
	if joined, err := c.joinUnderWay(ctx, key, load == nil, &w); err != nil {
		var zero T
		return zero, err // refused (counted)
	} else if !joined {
		return serveTyped(ctx, c, key, ttl, load)
	}
	select { // as Cache.Fetch: joinwait.go
	case <-w.done:
		w.ended = true
	case <-ctx.Done():
	}
	return joinedTyped(ctx, c, key, load, &w)
}

// fetchTypedTraced is Fetch[T] in a Tracer's scope.
func fetchTypedTraced[T any](ctx context.Context, c *Cache, key string, ttl time.Duration, load func(ctx context.Context) (T, error)) (T, error) {
	return traced(c, ctx, key, func(ctx context.Context) (T, error) {
		var zero T
		if err := c.validate(ctx, key, refuse.TTL(ttl), load == nil); err != nil {
			return zero, c.refused(ctx, key, err)
		}
		return serveTyped(ctx, c, key, ttl, load)
	})
}

// serveTyped is Fetch[T] once its arguments were validated: from the
// near cache, or from Redis.
func serveTyped[T any](ctx context.Context, c *Cache, key string, ttl time.Duration, load func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	h := how{version: strconv.Itoa(c.opts.CodecVersion)}
	var typ reflect.Type
	if c.near != nil {
		typ = reflect.TypeFor[T]()
		if e, ok := c.nearGet(near.Key{Key: key, Type: typ}, &h); ok {
			c.nearHit(ctx, key)
			if e.Err != nil {
				return zero, e.Err
			}
			return e.Val.(T), nil
		}
	}
	h.draw(c)
	encoded := args.Encoded(load, c.opts.Codec.Marshal)
	v, a, keep, err := fromRedisAs[T](ctx, c, key, loader{ttl: ttl, bytes: encoded}, h, nil)
	return typedAnswer(ctx, c, key, typ, v, a, keep, err)
}

// joinedTyped is Fetch[T]'s answer once it waited for w (joinwait.go).
func joinedTyped[T any](ctx context.Context, c *Cache, key string, load func(ctx context.Context) (T, error), w *underWay) (T, error) {
	h := how{version: strconv.Itoa(c.opts.CodecVersion)}
	h.draw(c) // for a fetch again, after an entry that did not decode
	l := loader{ttl: w.ttl, bytes: args.Encoded(load, c.opts.Codec.Marshal)}
	first := c.joinedAnswer(ctx, key, l, h, w)
	v, a, keep, err := fromRedisAs[T](ctx, c, key, l, h, &first)
	return typedAnswer(ctx, c, key, nil, v, a, keep, err)
}

// typedAnswer counts a Fetch[T]'s answer a (v, its value decoded; err,
// the codec's) and keeps a copy of it in the near cache, as typ, when it
// came from a peek (keep).
func typedAnswer[T any](ctx context.Context, c *Cache, key string, typ reflect.Type, v T, a answer, keep *peekCopy, err error) (T, error) {
	var zero T
	c.count(ctx, key, a.out)
	if err != nil {
		return zero, err
	}
	if a.err != nil {
		c.keepNear(key, typ, keep, nil, a.err, 0)
		return zero, a.err
	}
	c.keepNear(key, typ, keep, v, nil, len(a.val))
	return v, nil
}

// fromRedisAs is fromRedis for Fetch[T], the value decoded as T (err: the
// codec's). An entry that does not decode is asked for again as missing
// (h.skip), up to 3 times while joined flights answer it again; a fresh
// load, or another entry, that does not decode is the codec's error. first,
// when not nil, is the first answer, a joined call's (joinedTyped). The
// callers answered together (by one flight or one peek: answer.dec) share
// one decode of the value.
func fromRedisAs[T any](ctx context.Context, c *Cache, key string, l loader, h how, first *answer) (v T, a answer, keep *peekCopy, err error) {
	for tries := 0; ; tries++ {
		if tries == 0 && first != nil {
			a = *first // a joined call's (joinedTyped)
		} else {
			a, keep = c.fromRedis(ctx, key, l, h)
		}
		if a.err != nil {
			return v, a, keep, nil
		}
		if sv, ok := near.DecodedAs[T](a.dec, a.val); ok {
			return sv, a, keep, nil
		}
		if err = c.opts.Codec.Unmarshal(a.val, &v); err == nil {
			near.KeepDecoded(a.dec, a.val, v)
			return v, a, keep, nil
		}
		if a.soft == 0 || h.skip != 0 && a.soft != h.skip || tries == 3 {
			return v, a, keep, errorf("decode %q as %T: %w", key, v, err)
		}
		c.warn.DecodeFailed(key, fmt.Sprintf("%T", v))
		h.skip, v = a.soft, *new(T)
	}
}

// Codec turns the values of the typed Fetch[T] into bytes and back.
// Implementations must be safe for concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default Codec: encoding/json.
type JSONCodec struct{}

// Marshal implements Codec with json.Marshal.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal implements Codec with json.Unmarshal.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
