package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

// reply is an error reply of Redis, as go-redis returns it (redis.Error).
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

// One table says what each error says of Redis; every question about an
// error is answered from it.
func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}
	for _, tc := range []struct {
		err       error
		has, lack Class
	}{
		{nil, 0, Reply | Unavailable},
		{reply("LOADING Redis is loading the dataset in memory"), Reply | NotNow | Unavailable, Moved},
		{reply("BUSY Redis is busy running a script"), Reply | NotNow | Unavailable, 0},
		{reply("MOVED 3999 127.0.0.1:6381"), Reply | NotNow | Moved, Unavailable},
		{reply("ASK 3999 127.0.0.1:6381"), Reply | NotNow | Moved, Unavailable},
		{reply("NOREPLICAS Not enough good replicas"), Reply | Unavailable, NotNow},
		{reply("WRONGPASS invalid username-password pair"), Reply | Unavailable | AuthRefused | ClientRefused, NotNow},
		{reply("NOAUTH Authentication required."), Reply | Unavailable | AuthRefused | ClientRefused, 0},
		{reply("ERR invalid password"), Reply | AuthRefused, 0},
		{reply("ERR DB index is out of range"), Reply | ClientRefused, Unavailable | AuthRefused},
		{reply("NOSCRIPT No matching script"), Reply | NoScript, Unavailable},
		{reply("NOPERM this user has no permissions to run the 'get' command"), Reply | Denied, Unavailable},
		{reply("ERR Error running script: The user executing the script can't run this command or subcommand"), Reply | Denied, Unavailable},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), Reply | WriteRefused, Unavailable},
		{reply("READONLY You can't write against a read only replica."), Reply | WriteRefused, Unavailable},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), Reply, Unavailable | NotNow | Denied},
		{fmt.Errorf("fetch: %w", reply("LOADING")), Reply | NotNow | Unavailable, 0},
		{refused, Unavailable | Unreachable | RefusedDial, Reply | DialTimeout},
		{unreachableError{refused}, Unavailable | Unreachable | RefusedDial, 0},
		{tripErr{errorf("%w (since now: %w)", ErrCircuitOpen, unreachableError{refused})}, Unavailable | Unreachable | RefusedDial, 0},
		{dialTimeout, Unavailable | Unreachable | DialTimeout | Timeout, RefusedDial | ReadTimeout},
		{readTimeout, Unavailable | ReadTimeout | Timeout, Unreachable | DialTimeout},
		{callerGone{context.Canceled}, CallerGone, Unavailable | Reply},
		{callerGone{context.DeadlineExceeded}, CallerGone | Timeout, Unavailable},
		{ErrCircuitOpen, Unavailable, Reply | CallerGone},
		{ErrRedisTimeout, Unavailable, Reply},
		{errors.New("EOF"), Unavailable, Reply | Unreachable},
	} {
		c := Classify(tc.err)
		if c&tc.has != tc.has || c&tc.lack != 0 {
			t.Errorf("Classify(%v) = %b; want %b set, %b clear", tc.err, c, tc.has, tc.lack)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "i/o timeout" }
func (timeoutErr) Timeout() bool { return true }
