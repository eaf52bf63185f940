//go:build unix

package transport

import (
	"io"
	"net"
	"syscall"
)

// readNow reads what conn has received, without waiting: one read(2) on
// its socket, whatever goroutines of this process wait for the CPU. It
// returns 0 and no error when nothing has come, and io.EOF when the peer
// closed the connection.
func readNow(conn net.Conn, buf []byte) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return readSoon(conn, buf)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), buf)
		return true // never wait
	}); err != nil {
		return 0, err
	}
	switch {
	case rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK || rerr == syscall.EINTR:
		return 0, nil
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
