//go:build unix

package soak

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts a worker in a process group of its own, so that a
// Ctrl-C in the terminal reaches only the orchestrator, which then stops
// the workers in order (they also stop when their stdin closes, should the
// orchestrator die).
func setProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}
