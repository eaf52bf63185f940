// Package fill owns the rules of Options: what each field must be, in the
// order they are checked, the text that refuses a field, and the mechanics
// of defaults: a zero field takes its default, a negative one is refused by
// name, an interface holding a nil pointer is told from a nil interface.
// It sees Options by field name (Options), so the root lists no field
// twice; a rule naming a field Options lacks panics on every New.
//
// It may not touch what the fields mean or their default values: Options,
// its docs and its Default constants stay in the root, which hands the
// defaults in as an Options and wraps the error returned in
// ErrInvalidOptions.
package fill

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
)

// MinLeaseTTL is the shortest Options.LeaseTTL.
const MinLeaseTTL = 30 * time.Millisecond

// Options checks *dst, a corral.Options, against the rules (durations,
// factors, sizes, groups, interfaces, in this order) and sets each zero
// field to def's (an Options of defaults). It returns the first rule
// broken, unprefixed.
func Options(dst, def any) error {
	o := opts{reflect.ValueOf(dst).Elem(), reflect.ValueOf(def)}
	if err := o.fill("Prefix"); err != nil {
		return err
	}
	if p := o.f("Prefix").String(); strings.ContainsAny(p, "{}") {
		return fmt.Errorf("Prefix %q contains a brace; braces would change the Cluster hash slot of corral's keys", p)
	}
	for _, rule := range []func(opts) error{durations, factors, sizes, groups} {
		if err := rule(o); err != nil {
			return err
		}
	}
	if obs := o.f("Observer").Interface(); NilInside(obs) {
		return fmt.Errorf("Observer is a nil %T", obs)
	}
	return o.fill("Codec", "Logger", "Rand")
}

// durations checks Options' durations and fills in their defaults.
func durations(o opts) error {
	err := o.fill("LeaseTTL", "LoadTimeout", "RedisTimeout", "NegativeTTL", "StaleTTL", "ErrorTTL", "BreakerCooldown")
	if l := time.Duration(o.f("LeaseTTL").Int()); err == nil && l < MinLeaseTTL {
		return fmt.Errorf("LeaseTTL %v is below the minimum %v", l, MinLeaseTTL)
	}
	return err
}

// factors checks Beta and Jitter and fills in their defaults; DisableJitter
// makes Jitter 0.
func factors(o opts) error {
	if b := o.f("Beta").Float(); math.IsNaN(b) || math.IsInf(b, 0) || b < 0 {
		return fmt.Errorf("Beta %v is not a finite, non-negative number", b)
	}
	if j := o.f("Jitter").Float(); math.IsNaN(j) || j < 0 || j >= 1 {
		return fmt.Errorf("Jitter %v is outside [0, 1)", j)
	}
	o.fill("Beta", "Jitter")
	if o.f("DisableJitter").Bool() {
		o.f("Jitter").SetFloat(0)
	}
	return nil
}

// sizes checks Options' counts and sizes and fills in their defaults.
func sizes(o opts) error {
	return o.fill("NoticeInlineLimit", "MaxBackgroundRefreshes", "BreakerThreshold", "MaxValueBytes", "CompressMinBytes", "MaxPendingInvalidations")
}

// groups checks FailSafe and NearCache, which refuse a negative field as a
// whole, and fills in their defaults: NearCache's TTL only when its Size
// turns it on.
func groups(o opts) error {
	fs, near := o.in("FailSafe"), o.in("NearCache")
	if fs.negative() {
		return fmt.Errorf("FailSafe has a negative TTL, Throttle, Size or MaxBytes (%+v)", fs.v.Interface())
	}
	fs.fill("TTL", "Throttle", "Size", "MaxBytes")
	if near.negative() {
		return fmt.Errorf("NearCache has a negative Size, MaxBytes or TTL (%+v)", near.v.Interface())
	}
	if near.f("Size").Int() > 0 {
		near.fill("TTL")
	}
	return nil
}

// opts is a struct seen by field name (v, addressable), with its defaults.
type opts struct{ v, def reflect.Value }

// f is the field name of o; a name o lacks is a rule out of date, and
// panics.
func (o opts) f(name string) reflect.Value {
	f := o.v.FieldByName(name)
	if !f.IsValid() {
		panic(fmt.Sprintf("fill: %s has no field %s", o.v.Type(), name))
	}
	return f
}

// in is the struct field name of o, with its defaults.
func (o opts) in(name string) opts { return opts{o.f(name), o.def.FieldByName(name)} }

// fill sets each named field that is zero to its default. It returns an
// error naming the first negative one (and fills none after it).
func (o opts) fill(names ...string) error {
	for _, name := range names {
		f := o.f(name)
		if f.CanInt() && f.Int() < 0 {
			return fmt.Errorf("%s is negative (%v)", name, f.Interface())
		}
		if f.IsZero() || f.CanFloat() && f.Float() == 0 { // -0 too
			f.Set(o.def.FieldByName(name))
		}
	}
	return nil
}

// negative reports whether a numeric field of o is negative.
func (o opts) negative() bool {
	for i := range o.v.NumField() {
		if f := o.v.Field(i); f.CanInt() && f.Int() < 0 {
			return true
		}
	}
	return false
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
