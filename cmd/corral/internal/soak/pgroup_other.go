//go:build !unix

package soak

import "os/exec"

func setProcessGroup(*exec.Cmd) {}
