//go:build unix && !linux

package main

import (
	"io"
	"os/exec"
	"syscall"
)

type ttyHandoff struct{}

// setProcAttr puts the child in a process group of its own.
func setProcAttr(c *exec.Cmd, _ io.Reader) ttyHandoff {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return ttyHandoff{}
}

func (ttyHandoff) restore() {}

func groupAlive(pgid int) bool { return killAlive(pgid) }
