//go:build unix

package testkit

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusingAddr returns a loopback address (host:port) that refuses
// connections until t ends: a TCP socket is bound there and never listens,
// so a connection attempt is refused (ECONNREFUSED), and the port stays
// taken. A port merely closed again (net.Listen, then Close) may be taken
// by a server another test starts meanwhile, a Redis that then answers.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("testkit: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	// No SO_REUSEADDR: nothing else may bind the port while fd holds it.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testkit: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testkit: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
