package testkit

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// RefusingAddr's address refuses a dial, and its port cannot be listened on.
func TestRefusingAddr(t *testing.T) {
	addr := RefusingAddr(t)
	_, err := net.Dial("tcp", addr)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v; want refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listened on %s, which RefusingAddr holds", addr)
	}
}
