package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestE2EBenchLeaderKilled: `bench` against a cluster whose leader is
// killed (-9) mid-run prints its report for the run until then, says the
// connection was lost, exits 1, and releases on the new leader the locks
// whose release was in flight (the probe's finding: it printed one error
// line, no report, and left those locks held until their lease).
func TestE2EBenchLeaderKilled(t *testing.T) {
	c := startE2ECluster(t, 0)
	e, nodes := c.e, c.nodes
	e.eventually(45*time.Second, 0, "health", "--timeout", "2s")
	lj := e.waitLeader(15*time.Second, "")

	bp := e.start("", "bench", "--duration", "60s", "--conns", "2", "--pipeline", "4", "--keys", "100", "-o", "json")
	waitBenchProgress(t, bp)
	nodes[lj.Leader].kill9(t)
	if code := bp.wait(t); code != ExitError {
		t.Fatalf("bench with its leader killed: exit %d, want %d\n%s", code, ExitError, bp.err.String())
	}
	var br benchResultJSON
	if err := json.Unmarshal([]byte(bp.out.String()), &br); err != nil {
		t.Fatalf("no JSON report after the leader died: %v\nstdout: %s\nstderr: %s", err, bp.out.String(), bp.err.String())
	}
	if !strings.Contains(br.Lost, "connection lost") || br.Ops == 0 || br.Outcomes["G"] == 0 {
		t.Errorf("report: lost %q, ops %d, outcomes %v", br.Lost, br.Ops, br.Outcomes)
	}
	t.Logf("lost: %s; note: %s", br.Lost, br.Note)
	if strings.Contains(br.Note, "stay held") {
		t.Errorf("bench left locks whose release was in flight held: %s", br.Note)
	}
	if !strings.Contains(bp.err.String(), "cut short") {
		t.Errorf("stderr lacks the reason: %s", bp.err.String())
	}
}
