//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// e2eReadsFromLeader (#12 item 14): `locks` and `status` asked through a
// follower answer from the leader, and say so (text and JSON); a lock just
// granted is always listed (a follower's table may lag the grant). With
// --local the follower answers, and says its view may lag.
func e2eReadsFromLeader(t *testing.T, e *e2e, leader, follower nodeListNode) {
	t.Helper()
	type answered struct {
		ID, Addr, Role string
	}
	via := follower.ClientAddr + "," + leader.ClientAddr // the follower first
	for i := range 10 {
		key := "e2e/view/" + strconv.Itoa(i)
		tok := e.token(e.expect(0, "acquire", "--addr", via, key, "--lease", "30s"))
		p := e.expect(0, "locks", "--addr", via, "--prefix", key, "-o", "json")
		var lj struct {
			Locks []struct {
				Key   string `json:"key"`
				Token string `json:"token"`
			} `json:"locks"`
			AnsweredBy answered `json:"answered_by"`
		}
		if err := json.Unmarshal([]byte(p.out.String()), &lj); err != nil {
			t.Fatalf("locks json: %v\n%s", err, p.out.String())
		}
		if lj.AnsweredBy != (answered{leader.ID, leader.ClientAddr, "leader"}) {
			t.Fatalf("locks through %s answered by %+v, want the leader %s", via, lj.AnsweredBy, leader.ID)
		}
		if len(lj.Locks) != 1 || lj.Locks[0].Key != key || lj.Locks[0].Token != strconv.FormatUint(tok, 10) {
			t.Errorf("acquire && locks: %s not listed: %s", key, p.out.String())
		}
		e.expect(0, "release", "--addr", via, key, strconv.FormatUint(tok, 10))
	}
	p := e.expect(0, "locks", "--addr", via)
	if want := "answered by " + leader.ID + " at " + leader.ClientAddr + " (leader)"; !strings.Contains(p.err.String(), want) {
		t.Errorf("locks text: stderr %q lacks %q", p.err.String(), want)
	}

	p = e.expect(0, "status", "--addr", via, "-o", "json")
	var sj struct {
		NodeID     string   `json:"node_id"`
		Role       string   `json:"role"`
		AnsweredBy answered `json:"answered_by"`
	}
	if err := json.Unmarshal([]byte(p.out.String()), &sj); err != nil || sj.NodeID != leader.ID || sj.Role != "leader" ||
		sj.AnsweredBy != (answered{leader.ID, leader.ClientAddr, "leader"}) {
		t.Errorf("status json through %s: %v\n%s", via, err, p.out.String())
	}
	p = e.expect(0, "status", "--addr", via)
	for _, row := range [][]string{{"node", leader.ID}, {"address", leader.ClientAddr}, {"role", "leader"}} {
		if !strings.Contains(p.out.String(), row[0]+strings.Repeat(" ", 13-len(row[0]))+row[1]+"\n") {
			t.Errorf("status text lacks row %q:\n%s", row, p.out.String())
		}
	}

	// --local: the follower's own view, flagged.
	p = e.expect(0, "status", "--addr", via, "--local", "-o", "json")
	if err := json.Unmarshal([]byte(p.out.String()), &sj); err != nil || sj.NodeID != follower.ID ||
		sj.AnsweredBy != (answered{follower.ID, follower.ClientAddr, "follower"}) || !strings.Contains(p.err.String(), "may lag the leader") {
		t.Errorf("status --local through %s: %v\n%s%s", via, err, p.out.String(), p.err.String())
	}
	p = e.expect(0, "locks", "--addr", via, "--local")
	if !strings.Contains(p.err.String(), follower.ID+" at "+follower.ClientAddr+" (follower) may lag the leader") {
		t.Errorf("locks --local: stderr %q", p.err.String())
	}
}

// e2eHealthNotMember (#12 item 15): a --addr entry that no member has (a
// node removed and stopped) is named as not a member, and the verdict line
// says that it is what fails the check while every voter is healthy.
func e2eHealthNotMember(t *testing.T, e *e2e, members []string, gone string) {
	t.Helper()
	addrs := strings.Join(append(append([]string(nil), members...), gone), ",")
	var p *proc
	deadline := time.Now().Add(30 * time.Second)
	voters := fmt.Sprintf("%d of %d voters healthy", len(members), len(members))
	for {
		p = e.run("health", "--addr", addrs, "--timeout", "2s")
		if strings.Contains(p.out.String(), voters) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	out := p.out.String()
	if p.code != ExitBusy || !strings.Contains(out, "FAIL "+gone+": not a member of the cluster") ||
		!strings.Contains(out, "cluster UNHEALTHY: ") || !strings.Contains(out, voters+"; --addr names "+gone+", which is not a member\n") {
		t.Errorf("health with %s removed: exit %d\n%s%s", gone, p.code, out, p.err.String())
	}
	p = e.run("health", "--addr", addrs, "--timeout", "2s", "-o", "json")
	var hj struct {
		Healthy    bool     `json:"healthy"`
		NotMembers []string `json:"not_members"`
	}
	if err := json.Unmarshal([]byte(p.out.String()), &hj); err != nil || hj.Healthy || len(hj.NotMembers) != 1 || hj.NotMembers[0] != gone {
		t.Errorf("health json with %s removed: %v\n%s", gone, err, p.out.String())
	}
	// Without it, the same cluster is healthy.
	e.eventually(20*time.Second, 0, "health", "--addr", strings.Join(members, ","), "--timeout", "2s")
}
