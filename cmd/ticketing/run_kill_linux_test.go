//go:build linux

package main

import (
	"syscall"
	"testing"
	"time"
)

// TestE2ERunKilledTakesGroupDown (#12 item 3): kill -9 of `ticketing run`
// ends its command and what the command left in its group (the guard and
// Pdeathsig); SIGQUIT is handled like SIGTERM (forwarded, the group
// stopped, the lock released) instead of the Go runtime's dump-and-exit.
func TestE2ERunKilledTakesGroupDown(t *testing.T) {
	e := newE2E(t, nil)
	script := func(sfx string) string {
		return `sleep 300 & echo $! > grandchild` + sfx + `; echo $$ > child` + sfx + `; wait`
	}

	t.Run("SIGKILL", func(t *testing.T) {
		r := e.start("", "run", "kill9", "--lease", "60s", "--", "sh", "-c", script(""))
		waitFile(t, e.path("grandchild"))
		waitFile(t, e.path("child"))
		time.Sleep(100 * time.Millisecond) // the guard has the group id
		if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		r.wait(t)
		assertGoneWithin(t, e.path("child"), 10*time.Second)
		assertGoneWithin(t, e.path("grandchild"), 10*time.Second)
	})

	t.Run("SIGQUIT", func(t *testing.T) {
		r := e.start("", "run", "quit", "--lease", "60s", "--kill-grace", "1s", "--", "sh", "-c", script(".q"))
		waitFile(t, e.path("grandchild.q"))
		waitFile(t, e.path("child.q"))
		time.Sleep(100 * time.Millisecond)
		if err := r.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
			t.Fatal(err)
		}
		code := r.wait(t)
		if code != 128+int(syscall.SIGQUIT) {
			t.Errorf("run exit %d: stderr %.300s", code, r.err.String())
		}
		assertGoneWithin(t, e.path("grandchild.q"), 10*time.Second)
		e.expect(0, "acquire", "quit", "-n") // released
	})
}
