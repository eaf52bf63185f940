package fill

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// options has the fields of corral's Options that the rules name.
type options struct {
	Prefix                                            string
	LeaseTTL, LoadTimeout, RedisTimeout, NegativeTTL  time.Duration
	StaleTTL, ErrorTTL, BreakerCooldown               time.Duration
	Beta, Jitter                                      float64
	DisableJitter                                     bool
	NoticeInlineLimit, MaxBackgroundRefreshes         int
	BreakerThreshold, MaxValueBytes, CompressMinBytes int
	MaxPendingInvalidations                           int
	FailSafe                                          struct {
		TTL, Throttle time.Duration
		Size          int
		MaxBytes      int64
	}
	NearCache struct {
		Size     int
		MaxBytes int64
		TTL      time.Duration
	}
	Observer, Codec fmt.Stringer
	Logger          *strings.Builder
	Rand            func() float64
}

type named string

func (n *named) String() string { return string(*n) }

func defaults() options {
	d := options{Prefix: "p", LeaseTTL: time.Second, LoadTimeout: 2, RedisTimeout: 3, NegativeTTL: 4,
		StaleTTL: 0, ErrorTTL: 0, BreakerCooldown: 5, Beta: 1, Jitter: 0.1, NoticeInlineLimit: 6,
		MaxBackgroundRefreshes: 7, BreakerThreshold: 8, MaxValueBytes: 9, CompressMinBytes: 10,
		MaxPendingInvalidations: 11, Codec: new(named), Logger: new(strings.Builder), Rand: func() float64 { return 0 }}
	d.FailSafe.TTL, d.FailSafe.Throttle, d.FailSafe.Size, d.FailSafe.MaxBytes = 12, 13, 14, 15
	d.NearCache.TTL = 16
	return d
}

// TestOptionsDefaults checks that zero fields take their defaults, set
// ones stay, DisableJitter zeroes Jitter, and NearCache's TTL is filled
// only when its Size turns it on.
func TestOptionsDefaults(t *testing.T) {
	var o options
	def := defaults()
	if err := Options(&o, def); err != nil {
		t.Fatal(err)
	}
	if o.Prefix != "p" || o.LeaseTTL != time.Second || o.MaxPendingInvalidations != 11 || o.Beta != 1 ||
		o.Jitter != 0.1 || o.FailSafe != def.FailSafe || o.NearCache.TTL != 0 || o.Codec != def.Codec ||
		o.Logger != def.Logger || o.Rand == nil || o.Observer != nil {
		t.Errorf("filled: %+v", o)
	}
	o = options{Prefix: "q", LeaseTTL: time.Minute, Beta: math.Copysign(0, -1), DisableJitter: true, Jitter: 0.5}
	o.NearCache.Size = 1
	if err := Options(&o, def); err != nil {
		t.Fatal(err)
	}
	if o.Prefix != "q" || o.LeaseTTL != time.Minute || o.Beta != 1 || o.Jitter != 0 || o.NearCache.TTL != 16 {
		t.Errorf("filled: %+v", o)
	}
}

// TestOptionsRefused checks each rule's text, and that the first rule
// broken is the one said.
func TestOptionsRefused(t *testing.T) {
	var nilNamed *named
	for _, tc := range []struct {
		set  func(*options)
		want string
	}{
		{func(o *options) { o.Prefix = "a{b}" }, `Prefix "a{b}" contains a brace; braces would change the Cluster hash slot of corral's keys`},
		{func(o *options) { o.LoadTimeout = -time.Second }, "LoadTimeout is negative (-1s)"},
		{func(o *options) { o.LeaseTTL, o.ErrorTTL = time.Millisecond, -1 }, "ErrorTTL is negative (-1ns)"},
		{func(o *options) { o.LeaseTTL = time.Millisecond }, "LeaseTTL 1ms is below the minimum 30ms"},
		{func(o *options) { o.Beta = math.Inf(1) }, "Beta +Inf is not a finite, non-negative number"},
		{func(o *options) { o.Beta, o.Jitter = -1, 2 }, "Beta -1 is not a finite, non-negative number"},
		{func(o *options) { o.Jitter = 1 }, "Jitter 1 is outside [0, 1)"},
		{func(o *options) { o.Jitter = math.NaN() }, "Jitter NaN is outside [0, 1)"},
		{func(o *options) { o.CompressMinBytes = -2 }, "CompressMinBytes is negative (-2)"},
		{func(o *options) { o.FailSafe.MaxBytes = -1 }, "FailSafe has a negative TTL, Throttle, Size or MaxBytes ({TTL:0s Throttle:0s Size:0 MaxBytes:-1})"},
		{func(o *options) { o.NearCache.Size = -1 }, "NearCache has a negative Size, MaxBytes or TTL ({Size:-1 MaxBytes:0 TTL:0s})"},
		{func(o *options) { o.Observer = nilNamed }, "Observer is a nil *fill.named"},
	} {
		var o options
		tc.set(&o)
		if err := Options(&o, defaults()); err == nil || err.Error() != tc.want {
			t.Errorf("Options = %v; want %s", err, tc.want)
		}
	}
}

// TestOptionsOutOfDate checks that a rule naming a field the struct lacks
// panics, naming it.
func TestOptionsOutOfDate(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "has no field Prefix") {
			t.Errorf("recovered %v", r)
		}
	}()
	var o struct{ LeaseTTL time.Duration }
	_ = Options(&o, o)
}

// TestNilInside checks that a nil pointer inside an interface is told
// from a nil interface and from a value.
func TestNilInside(t *testing.T) {
	var p *int
	if NilInside(nil) || !NilInside(p) || NilInside(3) || !NilInside((func())(nil)) {
		t.Error("NilInside")
	}
}
