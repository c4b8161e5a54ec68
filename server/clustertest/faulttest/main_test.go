// Package faulttest runs Jepsen-style fault tests against clusters of real
// `ticketing serve` processes on loopback: a fault-injecting proxy between
// peers (clustertest.Net), kill -9, SIGSTOP/SIGCONT, SIGTERM, restarts and
// membership changes under a concurrent lock workload whose history is
// checked with porcupine (clustertest.History). See docs/testing.md.
package faulttest

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/ticketing/ticketing/server/clustertest"
)

// bin is the ticketing binary built once for the package.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if runtime.GOOS != "linux" {
		fmt.Println("faulttest: skipped (needs Linux: process groups, /proc for the proxy)")
		return m.Run()
	}
	if b := os.Getenv("TICKETING_BIN"); b != "" {
		bin = b // a prebuilt binary (e.g. a release build)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "ticketing-faulttest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err = clustertest.BuildBinary(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func needBinary(t *testing.T) {
	t.Helper()
	if bin == "" {
		t.Skip("no ticketing binary (not Linux)")
	}
	if testing.Short() {
		t.Skip("process-level fault tests are skipped in -short mode")
	}
}
