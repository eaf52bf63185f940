package near

import "testing"

// A value is kept from the second decode on, and found only for the very
// bytes it was decoded from, and as the type it was decoded as.
func TestDecoded(t *testing.T) {
	var d Decoded
	src := []byte(`{"a":1}`)
	if _, ok := DecodedAs[int](&d, src); ok {
		t.Fatal("an empty Decoded held a value")
	}
	KeepDecoded(&d, src, 7)
	if _, ok := DecodedAs[int](&d, src); ok {
		t.Fatal("the first decode was kept")
	}
	KeepDecoded(&d, src, 7)
	if v, ok := DecodedAs[int](&d, src); !ok || v != 7 {
		t.Fatalf("DecodedAs = %v, %v; want 7, true", v, ok)
	}
	if _, ok := DecodedAs[int](&d, append([]byte(nil), src...)); ok {
		t.Fatal("equal bytes elsewhere in memory were taken for the same")
	}
	if _, ok := DecodedAs[int](&d, src[:3]); ok {
		t.Fatal("a prefix of the bytes was taken for them")
	}
	if _, ok := DecodedAs[int64](&d, src); ok {
		t.Fatal("a value decoded as int was found as int64")
	}
	var a Decoded
	KeepDecoded[any](&a, src, 7)
	KeepDecoded[any](&a, src, 7)
	if _, ok := DecodedAs[int](&a, src); ok {
		t.Fatal("a value decoded as any was found as int")
	}
	var e Decoded
	KeepDecoded[any](&e, []byte{}, nil)
	KeepDecoded[any](&e, []byte{}, nil)
	if _, ok := DecodedAs[any](&e, []byte{}); ok {
		t.Fatal("empty bytes were taken for the same")
	}
	KeepDecoded[int](nil, src, 1) // a nil Decoded keeps nothing, and holds nothing
	if _, ok := DecodedAs[int](nil, src); ok {
		t.Fatal("a nil Decoded held a value")
	}
	KeepDecoded[error](&e, src, nil)
	if _, ok := DecodedAs[error](&e, src); ok {
		t.Fatal("a nil interface value was handed out")
	}
}
