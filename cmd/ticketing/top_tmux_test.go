//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/server"
)

// TestTopInTmux runs `ticketing top` on an 80×24 tmux pane (issue #28 item
// 10) against a live node, an address nothing listens on and a node whose
// token the dashboard does not have: the screen (capture-pane) gives the
// dead node's reason ("connection refused", not "dial…") and shows the
// credential failure as AUTH FAILED, not as DOWN.
func TestTopInTmux(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed")
	}
	e := newE2E(t, nil)
	live := strings.TrimPrefix(e.env[0], "TICKETING_ADDR=")
	dead := hp("127.0.0.1", freePorts(t, 1)[0])
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.ClientToken = "127.0.0.1:0", "a-token-top-does-not-have"
	locked, err := server.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locked.Close() })

	sock := fmt.Sprintf("tk-top-%d", os.Getpid())
	tm := func(args ...string) (string, error) {
		c := exec.Command(tmux, append([]string{"-L", sock, "-f", "/dev/null"}, args...)...)
		c.Env = append(os.Environ(), "TERM=xterm-256color")
		out, err := c.CombinedOutput()
		return string(out), err
	}
	cmdline := shellQuote(e.bin) + " top --interval 200ms --addr " + live + "," + dead + "," + locked.Addr()
	if out, err := tm("new-session", "-d", "-x", "80", "-y", "24", "-s", "top", "env -u TICKETING_TOKEN -u TICKETING_ADMIN_TOKEN "+cmdline); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	var screen string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		screen, _ = tm("capture-pane", "-p", "-t", "top")
		if rowWith(screen, dead, "connection refused") != "" && rowWith(screen, locked.Addr(), "AUTH FAILED") != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 80-column screen does not show the dead node's reason and the auth failure:\n%s", screen)
		}
	}
	if r := rowWith(screen, locked.Addr(), "DOWN"); r != "" {
		t.Errorf("the auth failure is shown as DOWN: %q", r)
	}
}

// rowWith is the first line of screen holding both a and b ("" if none).
func rowWith(screen, a, b string) string {
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, a) && strings.Contains(l, b) {
			return l
		}
	}
	return ""
}
