package near

import (
	"reflect"
	"sync/atomic"
)

// Decoded holds a value decoded from some bytes, for the other callers
// answered with those very bytes (in the root, the callers of one flight
// or one peek), so that a stampede's callers of a typed Fetch do not each
// decode the value again. The first decode is not kept (most answers have
// one caller, whose hit should not pay for keeping it); the second is.
// Its zero value holds nothing; it is safe for concurrent use.
type Decoded struct {
	p      atomic.Pointer[decoded]
	before atomic.Bool // a decode was made and not kept
}

type decoded struct {
	src []byte // kept, so that its memory is not reused while held
	typ reflect.Type
	v   any
}

// DecodedAs returns the value of type T that d holds decoded from src
// itself: the same memory, not just equal bytes (ok false otherwise, for an
// empty src, and for a nil d).
func DecodedAs[T any](d *Decoded, src []byte) (v T, ok bool) {
	if d == nil {
		return v, false
	}
	if h := d.p.Load(); h != nil && h.typ == reflect.TypeFor[T]() && len(src) > 0 && len(h.src) == len(src) && &h.src[0] == &src[0] {
		v, ok = h.v.(T)
	}
	return v, ok
}

// KeepDecoded records v, decoded from src, in d, unless it is d's first
// decode; a nil d keeps nothing.
func KeepDecoded[T any](d *Decoded, src []byte, v T) {
	if d != nil && d.before.Swap(true) {
		d.p.Store(&decoded{src: src, typ: reflect.TypeFor[T](), v: v})
	}
}
