//go:build unix

package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// runDemo runs scripts/demo.sh (the README's first command, `make demo`)
// from the repository root with extra environment, and returns its exit
// code, stdout and stderr.
func runDemo(t *testing.T, env ...string) (int, string, string) {
	t.Helper()
	ticketingBin(t) // skips under -short, like every end-to-end test
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "demo.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestE2EDemo: `make demo` takes a real lock, sees it held (exit 3), releases
// it and runs a command under the lock with its fencing token in
// TICKETING_FENCING_TOKEN (not the deprecated TICKETING_TOKEN).
func TestE2EDemo(t *testing.T) {
	code, out, errs := runDemo(t)
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if !strings.Contains(out, "exit 3") {
		t.Errorf("demo did not show the held lock's exit 3:\n%s", out)
	}
	if !regexp.MustCompile(`in the critical section with fencing token [1-9][0-9]*`).MatchString(out) {
		t.Errorf("run's command did not see its fencing token:\n%s", out)
	}
}

// TestE2EDemoServerDoesNotComeUp: when the server cannot start (its port is
// taken), the demo fails and shows the server's log instead of deleting it.
func TestE2EDemoServerDoesNotComeUp(t *testing.T) {
	ticketingBin(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	code, out, errs := runDemo(t, "TICKETING_DEMO_PORT="+port)
	if code == 0 {
		t.Fatalf("demo succeeded with its port taken:\n%s", out)
	}
	if !strings.Contains(errs, "did not come up") || !strings.Contains(errs, "address already in use") {
		t.Errorf("demo's stderr does not say why:\n%s", errs)
	}
}
