package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestTopE2E runs scripts/tui-e2e.sh: the real binary and server, one
// holder and 3 waiters, `ticketing top` in a tmux pane, checked on screen,
// quit with q, terminal restored. CI installs tmux (.ci/run).
func TestTopE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the ticketing top end-to-end test (scripts/tui-e2e.sh)")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed: skipping the ticketing top end-to-end test (scripts/tui-e2e.sh); install tmux to run it")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH: scripts/tui-e2e.sh builds the binary")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "tui-e2e.sh"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("scripts/tui-e2e.sh: %v", err)
	}
}
