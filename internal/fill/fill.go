// Package fill owns the mechanics of Options' defaults: a zero field takes
// its default, a negative one is refused, and an interface holding a nil
// pointer is told from a nil interface.
//
// It may not touch which fields there are, their defaults or what they
// mean: Options and its docs stay in the root, which lists its fields here
// and wraps the errors returned in ErrInvalidOptions.
package fill

import (
	"fmt"
	"reflect"
	"time"
)

// Field is a field of Options: its name, where it is, and its default.
type Field[T int | time.Duration] struct {
	name string
	v    *T
	def  T
}

// F returns the Field name, at v, whose default is def.
func F[T int | time.Duration](name string, v *T, def T) Field[T] { return Field[T]{name, v, def} }

// Defaults sets every zero field of fs to its default. It returns an error
// naming the first negative one.
func Defaults[T int | time.Duration](fs ...Field[T]) error {
	for _, f := range fs {
		if *f.v < 0 {
			return fmt.Errorf("%s is negative (%v)", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return nil
}

// NilInside reports whether v is an interface holding a nil pointer (or
// func, map, ...): not nil, yet any call of its methods would fail.
func NilInside(v any) bool {
	if v == nil {
		return false
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return r.IsNil()
	}
	return false
}
