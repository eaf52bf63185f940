package batch

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/corralhq/corral/internal/errprefix"
)

// The per-key bookkeeping of a FetchMany that needs no Cache: its keys
// without repeats, a typed loadMany's values encoded, and the text and the
// order of its keys' errors (the root's BatchError).

// Distinct returns keys without repeats, each where it first appears.
func Distinct(keys []string) []string {
	out := make([]string, 0, len(keys))
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

// Encode returns the values found of keys, encoded by marshal (vals), and
// the keys whose value did not encode, each with its error (failed). A key
// not in found is in neither; a key of found not among keys is dropped.
func Encode[T any](keys []string, found map[string]T, marshal func(any) ([]byte, error)) (vals map[string][]byte, failed map[string]error) {
	vals, failed = make(map[string][]byte, len(found)), map[string]error{}
	for _, k := range keys {
		if v, ok := found[k]; ok {
			b, err := marshal(v)
			if err != nil {
				failed[k] = errprefix.Errorf(errprefix.Corral, "encode %T: %w", v, err)
				continue
			}
			vals[k] = b
		}
	}
	return vals, failed
}

// shown is how many keys' errors Describe says.
const shown = 3

// Describe summarises errs, the errors of a batch's keys: how many keys
// failed, and the first few (in key order) with the first line of their
// error, said without corral's prefix.
func Describe(errs map[string]error) string {
	keys := slices.Sorted(maps.Keys(errs))
	var b strings.Builder
	fmt.Fprintf(&b, errprefix.Corral+"%d of the keys failed", len(keys))
	for _, k := range keys[:min(shown, len(keys))] {
		msg, _, _ := strings.Cut(errprefix.Trim(errprefix.Corral, errs[k]).Error(), "\n")
		fmt.Fprintf(&b, "; %q: %s", k, msg)
	}
	if len(keys) > shown {
		fmt.Fprintf(&b, "; and %d more", len(keys)-shown)
	}
	return b.String()
}

// InKeyOrder returns errs' errors in the order of their keys.
func InKeyOrder(errs map[string]error) []error {
	keys := slices.Sorted(maps.Keys(errs))
	out := make([]error, len(keys))
	for i, k := range keys {
		out[i] = errs[k]
	}
	return out
}
