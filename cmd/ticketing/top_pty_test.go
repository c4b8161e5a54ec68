//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestTopNoTerminalQueriesAtStartup: linking the dashboard's TUI library
// must not make every subcommand talk to the terminal. Bubble Tea v1 asked
// the terminal for its background colour and the cursor position in a
// package init (ESC ] 11 ; ? and ESC [ 6 n), so any `ticketing` command with
// stdout on a terminal wrote those queries, could wait for the answer, and
// ate typed-ahead input. `ticketing version` is run on a pseudo-terminal
// (util-linux script) with a TERM that has colours: its output must hold no
// ESC byte at all.
func TestTopNoTerminalQueriesAtStartup(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script (util-linux) is not installed: no pseudo-terminal to run the binary on")
	}
	bin := ticketingBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// -q: no "Script started" lines; -e: the command's exit status;
	// /dev/null: no typescript file.
	cmd := exec.CommandContext(ctx, script, "-qec", shellQuote(bin)+" version", "/dev/null")
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "TERM", "NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE":
			continue // a colour terminal below, whatever the test's own
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "TERM=xterm-256color")
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.Output()
	took := time.Since(start)
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && len(out) == 0 && bytes.Contains(ee.Stderr, []byte("unrecognized option")) {
			t.Skipf("this script is not util-linux's: %s", ee.Stderr)
		}
		t.Fatalf("script -qec 'ticketing version': %v\nstdout %q", err, out)
	}
	if !strings.Contains(string(out), "ticketing ") {
		t.Fatalf("no version line on the terminal: %q", out)
	}
	if i := bytes.IndexByte(out, 0x1b); i >= 0 {
		t.Errorf("`ticketing version` wrote an escape sequence to the terminal at byte %d: %q", i, out)
	}
	t.Logf("on a pty in %v: %q", took.Round(time.Millisecond), out)
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
