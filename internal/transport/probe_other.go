//go:build !unix

package transport

import "net"

// readNow reads what conn has received, waiting at most a millisecond.
func readNow(conn net.Conn, buf []byte) (int, error) { return readSoon(conn, buf) }
