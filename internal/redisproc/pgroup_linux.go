//go:build linux

package redisproc

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the server in a process group of its own, so that a
// Ctrl-C in the terminal reaches the program that owns it, which stops it,
// and not the server directly; and has the kernel kill the server if its
// owner dies without stopping it (a test binary killed by its timeout).
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
