package batch

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestDistinct(t *testing.T) {
	got := Distinct([]string{"b", "a", "b", "", "c", "a", ""})
	if want := []string{"b", "a", "", "c"}; !slices.Equal(got, want) {
		t.Errorf("Distinct = %q, want %q (first appearances, in order)", got, want)
	}
	if got := Distinct(nil); len(got) != 0 {
		t.Errorf("Distinct(nil) = %q", got)
	}
}

func TestEncode(t *testing.T) {
	errBad := errors.New("corral: cannot encode")
	marshal := func(v any) ([]byte, error) {
		if v == "bad" {
			return nil, errBad
		}
		return json.Marshal(v)
	}
	found := map[string]string{"a": "x", "bad": "bad", "unasked": "y"}
	vals, failed := Encode([]string{"a", "bad", "missing"}, found, marshal)
	if len(vals) != 1 || string(vals["a"]) != `"x"` {
		t.Errorf("vals %q, want a's alone, encoded", vals)
	}
	if len(failed) != 1 || !errors.Is(failed["bad"], errBad) || failed["bad"].Error() != "corral: encode string: cannot encode" {
		t.Errorf("failed %v, want bad's encoding error, wrapped, with the prefix once", failed)
	}
}

func TestDescribeAndInKeyOrder(t *testing.T) {
	errs := map[string]error{}
	for _, k := range []string{"e", "d", "c", "b", "a"} {
		errs[k] = fmt.Errorf("corral: %s failed\nsecond line", k)
	}
	want := `corral: 5 of the keys failed; "a": a failed; "b": b failed; "c": c failed; and 2 more`
	if got := Describe(errs); got != want {
		t.Errorf("Describe = %q\nwant       %q", got, want)
	}
	one := map[string]error{"k": errors.New("down")}
	if got := Describe(one); got != `corral: 1 of the keys failed; "k": down` {
		t.Errorf("Describe of one = %q", got)
	}
	var order []string
	for _, err := range InKeyOrder(errs) {
		order = append(order, strings.Fields(err.Error())[1])
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(order, want) {
		t.Errorf("InKeyOrder: %q, want %q", order, want)
	}
}
