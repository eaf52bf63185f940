package fill

import (
	"testing"
	"time"
)

// TestDefaults checks that zero fields take their defaults, others stay,
// and a negative one is refused by name.
func TestDefaults(t *testing.T) {
	a, b := 0, 3
	if err := Defaults(F("A", &a, 7), F("B", &b, 9)); err != nil || a != 7 || b != 3 {
		t.Errorf("Defaults = %v; a %d, b %d", err, a, b)
	}
	d := -time.Second
	if err := Defaults(F("D", &d, time.Minute)); err == nil || err.Error() != "D is negative (-1s)" {
		t.Errorf("Defaults of a negative field = %v", err)
	}
}

// TestNilInside checks that a nil pointer inside an interface is told
// from a nil interface and from a value.
func TestNilInside(t *testing.T) {
	var p *int
	if NilInside(nil) || !NilInside(p) || NilInside(3) || !NilInside((func())(nil)) {
		t.Error("NilInside")
	}
}
