//go:build unix

package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// benchResultJSON is the part of `bench -o json` the cluster tests read.
type benchResultJSON struct {
	Addr         string            `json:"addr"`
	Ops          uint64            `json:"ops"`
	Refused      uint64            `json:"refused"`
	Redirects    uint64            `json:"redirects"`
	RedirectedTo string            `json:"redirected_to"`
	Acquires     uint64            `json:"acquires"`
	Releases     uint64            `json:"releases"`
	Outcomes     map[string]uint64 `json:"outcomes"`
	Latency      struct {
		Count uint64 `json:"count"`
	} `json:"latency"`
	Note string `json:"note"`
	Lost string `json:"lost"`
}

var benchProgress = regexp.MustCompile(`\d[\d,]* ops `)

// waitBenchProgress waits (30 s at most) until the running bench bp reports
// ops on its progress line.
func waitBenchProgress(t *testing.T, bp *proc) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		return benchProgress.MatchString(bp.err.String()) && !strings.Contains(bp.err.String(), " 0 ops ")
	}, "bench to report progress")
}

// e2eBenchLeaderChange is #12 item 7 on a running cluster whose every node
// is in e's TICKETING_ADDR (the comma-separated list of cluster-local.sh
// env): bench drives the leader; when the leadership moves during the run,
// the redirects (M) are not ops, the slots that got one stop (the run ends
// instead of spinning on redirects), and the locks whose release was
// redirected are released on the new leader. A follower driven as given
// (its admin query refused) grants nothing: exit 1, saying it is not the
// leader.
func e2eBenchLeaderChange(t *testing.T, e *e2e) {
	t.Helper()
	lj := e.waitLeader(15*time.Second, "")
	var leader, next nodeListNode
	for _, n := range lj.Nodes {
		switch {
		case n.ID == lj.Leader:
			leader = n
		case next.ID == "":
			next = n
		}
	}
	bp := e.start("", "bench", "--duration", "50s", "--conns", "2", "--pipeline", "4", "--keys", "100", "-o", "json")
	waitBenchProgress(t, bp)
	e.expect(0, "node", "transfer-leader", "--id", next.ID)
	start := time.Now()
	if code := bp.wait(t); code != 0 {
		t.Fatalf("bench across a leader change: exit %d\n%s", code, bp.err.String())
	}
	if took := time.Since(start); took > 40*time.Second {
		t.Errorf("bench went on %v after the leader moved (spinning on redirects)", took)
	}
	var br benchResultJSON
	if err := json.Unmarshal([]byte(bp.out.String()), &br); err != nil {
		t.Fatalf("bench json: %v\n%s", err, bp.out.String())
	}
	o := br.Outcomes
	if br.Addr != leader.ClientAddr || br.Redirects == 0 || o["M"] != br.Redirects || o["G"] == 0 ||
		br.Ops != br.Acquires+br.Releases || br.Acquires != o["G"]+o["T"] || br.Releases != o["O"]+o["N"] ||
		br.Latency.Count != br.Ops {
		t.Errorf("bench across a leader change: redirects must not be ops:\n%s", bp.out.String())
	}
	if strings.Contains(br.Note, "stay held") {
		t.Errorf("bench left locks held: %s", br.Note)
	}
	nl := e.waitLeader(15*time.Second, "")
	p := e.expect(0, "locks", "--addr", nl.LeaderAddr, "--prefix", "bench:", "-o", "json")
	if strings.Contains(p.out.String(), `"bench:`) {
		t.Errorf("bench keys still held on the leader after the run:\n%s", p.out.String())
	}

	// A follower driven as given grants nothing: exit 1, not "N ops/s".
	follower := nl.follower()
	p = e.run("bench", "--addr", follower.ClientAddr, "--admin-token", "not-the-token", "--duration", "5s", "--progress=false", "-o", "json")
	if err := json.Unmarshal([]byte(p.out.String()), &br); p.code != ExitError || err != nil || br.Ops != 0 || br.Redirects == 0 ||
		!strings.Contains(p.err.String(), "not the cluster's leader") {
		t.Errorf("bench on a follower: exit %d (want %d) %v\n%s%s", p.code, ExitError, err, p.out.String(), p.err.String())
	}
}
