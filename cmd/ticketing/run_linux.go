//go:build linux

package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ttyHandoff is the terminal given to the child's process group, to take
// back when it exits.
type ttyHandoff struct {
	fd     int
	pgrp   int
	active bool
}

// setProcAttr puts the child in a process group of its own and has the
// kernel SIGKILL it should run itself die (SIGKILL cannot be forwarded).
// When stdin is our controlling terminal and we are in its foreground,
// the child's group takes the foreground, so that it can read the terminal
// and gets the terminal's Ctrl-C itself (a background group reading it
// would be stopped by SIGTTIN).
func setProcAttr(c *exec.Cmd, in io.Reader) ttyHandoff {
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	f, ok := in.(*os.File)
	if !ok {
		return ttyHandoff{}
	}
	fd := int(f.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || fg != syscall.Getpgrp() {
		return ttyHandoff{} // not a terminal, or we run in the background
	}
	c.SysProcAttr.Foreground = true
	c.SysProcAttr.Ctty = fd
	return ttyHandoff{fd: fd, pgrp: fg, active: true}
}

// restore takes the terminal's foreground back.
func (t ttyHandoff) restore() {
	if !t.active {
		return
	}
	signal.Ignore(syscall.SIGTTOU) // we are a background group now
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, t.pgrp)
}

// groupAlive reports whether process group pgid still has a live member.
// Zombies do not count: an orphan that was killed may wait a while for
// init to reap it. Falls back to kill(-pgid, 0) without /proc.
func groupAlive(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return killAlive(pgid)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return killAlive(pgid)
	}
	want := strconv.Itoa(pgid)
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == want && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}
