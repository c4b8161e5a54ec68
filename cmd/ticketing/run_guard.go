//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// The run guard makes CMD's process group unable to outlive `ticketing run`
// (issue #12 item 3). On Linux the kernel kills CMD itself when run dies
// (Pdeathsig), but not what CMD started in its group. So run starts a copy
// of this binary, in a session of its own (a signal to run's process group
// does not reach it), holding the read end of a pipe: run writes CMD's
// process group id, and "done" once the group is empty. When the pipe
// closes without "done" (run was killed, even with SIGKILL), the guard
// kills the group with SIGKILL and exits.
//
// What stays impossible: a SIGKILL of the guard and of run together (kill
// -9 of both pids, the OOM killer taking both) leaves CMD running until it
// ends by itself, while the lease runs out; processes CMD moved out of its
// group (setsid, daemons) escape the group kill. Without Linux (no
// Pdeathsig) the guard's kill is the only one.

const guardCmdName = "__run-guard"

// newCmdRunGuard is the hidden guard process.
func newCmdRunGuard(*Factory) *cobra.Command {
	return &cobra.Command{
		Use:    guardCmdName,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			runGuard(cmd.InOrStdin())
			return nil
		},
	}
}

// runGuard reads a process group id, then waits for "done"; anything else
// (end of file, an error) kills the group.
func runGuard(in io.Reader) {
	// A guard must outlive its run: it ignores the signals a terminal or
	// run's group would get.
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGPIPE} {
		ignoreSignal(s)
	}
	r := bufio.NewReader(in)
	line, err := r.ReadString('\n')
	if err != nil {
		return // run ended before CMD started
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pgid <= 1 {
		return
	}
	if line, err := r.ReadString('\n'); err == nil && strings.TrimSpace(line) == "done" {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// runGuardian is run's side of the guard.
type runGuardian struct {
	w *os.File
	c *exec.Cmd
}

// startGuard starts the guard process; nil (and a warning) when it cannot.
func startGuard(errOut io.Writer) *runGuardian {
	self, err := os.Executable()
	if err == nil {
		var r, w *os.File
		if r, w, err = os.Pipe(); err == nil {
			c := exec.Command(self, guardCmdName)
			c.Stdin = r
			c.Env = []string{} // no secrets, no TICKETING_* settings
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			err = c.Start()
			r.Close()
			if err == nil {
				return &runGuardian{w: w, c: c}
			}
			w.Close()
		}
	}
	fmt.Fprintf(errOut, "ticketing: warning: no run guard (%v): if run is killed, what CMD started may outlive it\n", err)
	return nil
}

// watch hands the guard CMD's process group.
func (g *runGuardian) watch(pgid int) {
	if g != nil {
		fmt.Fprintf(g.w, "%d\n", pgid)
	}
}

// done tells the guard the group is empty, and reaps it.
func (g *runGuardian) done() {
	if g == nil {
		return
	}
	_, _ = io.WriteString(g.w, "done\n")
	g.w.Close()
	_ = g.c.Wait()
}
