package payload

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

var errTooLarge = errors.New("corral: value too large")

func TestEncodeCompressesOnlyWhatSaves(t *testing.T) {
	long := []byte(strings.Repeat("abc", 100))
	for _, tc := range []struct {
		name       string
		c          Codec
		value      []byte
		compressed bool
	}{
		{"off", Codec{}, long, false},
		{"under the minimum", Codec{CompressMin: 1000}, long, false},
		{"at the minimum", Codec{CompressMin: len(long)}, long, true},
		{"saves nothing", Codec{CompressMin: 1}, []byte("x"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, compressed := tc.c.Encode(tc.value)
			if compressed != tc.compressed {
				t.Fatalf("compressed %v, want %v", compressed, tc.compressed)
			}
			if !compressed && !bytes.Equal(p, tc.value) {
				t.Fatalf("an uncompressed payload %q is not its value", p)
			}
			if compressed && len(p) >= len(tc.value) {
				t.Fatalf("compressed to %d bytes of %d", len(p), len(tc.value))
			}
			v, err := Codec{MaxValue: len(tc.value)}.Decode(p, compressed)
			if err != nil || !bytes.Equal(v, tc.value) {
				t.Fatalf("decoded %q, %v; want the value", v, err)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	long := []byte(strings.Repeat("abc", 100))
	p, _ := Codec{CompressMin: 1}.Encode(long)
	c := Codec{MaxValue: len(long) - 1, TooLarge: errTooLarge}
	_, err := c.Decode(p, true)
	if !errors.Is(err, errTooLarge) || err.Error() != "corral: decompress: 300 bytes: value too large" {
		t.Errorf("over MaxValue: %v; want TooLarge, said once with its prefix", err)
	}
	if _, err := c.Decode([]byte("not s2"), true); err == nil || !strings.HasPrefix(err.Error(), "corral: decompress: ") {
		t.Errorf("a corrupt payload: %v; want a decompress error", err)
	}
	if v, err := c.Decode(long, false); err != nil || !bytes.Equal(v, long) {
		t.Errorf("an uncompressed payload over MaxValue: %q, %v; want it as is (the limit bounds decompression)", v, err)
	}
}
