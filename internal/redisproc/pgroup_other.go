//go:build !unix

package redisproc

import "os/exec"

func setProcessGroup(*exec.Cmd) {}
