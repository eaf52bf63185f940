//go:build unix && !linux

package redisproc

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the server in a process group of its own, so that a
// Ctrl-C in the terminal reaches the program that owns it, which stops it,
// and not the server directly.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
