package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestServePeakRSSBound (issue #21, docs/benchmarks.md "Round two"): the
// built binary's `serve` peaks (VmHWM) well under the 15–18 MB it reached
// before servemem split the executable's read-only segments into one-page
// VMAs, idle and after a short load of 64 connections. The bound is
// generous (measured: 8.5–9.5 MB for this unstripped build, 17.8 MB before);
// it catches the start-up peak coming back (fault-around over the package
// initializers of the whole binary), not small drifts.
func TestServePeakRSSBound(t *testing.T) {
	p, addr := spawnServe(t)
	pid := p.cmd.Process.Pid
	const boundKB = 13 << 10
	if hwm := procStatusKB(t, pid, "VmHWM"); hwm > boundKB {
		t.Errorf("idle serve: VmHWM %d kB > %d kB", hwm, boundKB)
	}
	w := newWorld(t, ticketingBin(t), addr)
	w.expect(0, "bench", "--addr", addr, "--conns", "64", "--pipeline", "1", "--keys", "10000",
		"--ops", "20000", "--progress=false", "--server-stats=false")
	if hwm := procStatusKB(t, pid, "VmHWM"); hwm > boundKB {
		t.Errorf("serve after 64 × 1 pairs: VmHWM %d kB > %d kB (RssAnon %d kB, RssFile %d kB)", hwm, boundKB,
			procStatusKB(t, pid, "RssAnon"), procStatusKB(t, pid, "RssFile"))
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Errorf("serve exit %d: %s", code, p.err.String())
	}
}

// procStatusKB reads one "Name:   N kB" line of /proc/PID/status.
func procStatusKB(t *testing.T, pid int, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("%s: %q", name, l)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", name, pid)
	return 0
}
