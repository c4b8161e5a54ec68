//go:build unix

package main

// End-to-end tests of the cluster commands: real `ticketing serve`
// processes on loopback, driven through the real binary (node list/add/
// remove/transfer-leader, health, clock-skew, acquire through a follower),
// and scripts/cluster-local.sh. Skipped with -short.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePorts returns n loopback ports that were free a moment ago (the
// listeners are closed so that the nodes can bind them; start them soon).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	// Below the ephemeral range (depFreeRange): a port that the OS gave a
	// `:0` listener here and that was closed again may be handed to another
	// test's listener or outgoing connection before the node binds it.
	base := depFreeRange(t, n)
	ports := make([]int, n)
	for i := range ports {
		ports[i] = base + i
	}
	return ports
}

// kill9 kills p's process group and waits for it.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.wait(t)
}

// eventually reruns args until it exits with code (at most d), and returns
// the last run.
func (e *e2e) eventually(d time.Duration, code int, args ...string) *proc {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		p := e.run(args...)
		if p.code == code {
			return p
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("ticketing %s: exit %d, want %d within %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), p.code, code, d, p.out.String(), p.err.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nodeList runs node list -o json.
func (e *e2e) nodeList(args ...string) nodeListJSON {
	e.t.Helper()
	p := e.expect(0, append([]string{"node", "list", "-o", "json", "--timeout", "2s"}, args...)...)
	var lj nodeListJSON
	if err := json.Unmarshal([]byte(p.out.String()), &lj); err != nil {
		e.t.Fatalf("node list json: %v\n%s", err, p.out.String())
	}
	return lj
}

// follower is the first row of the list that is not the leader's.
func (l nodeListJSON) follower() nodeListNode {
	for _, n := range l.Nodes {
		if n.ID != l.Leader {
			return n
		}
	}
	return nodeListNode{}
}

// waitLeader polls node list until want (any node when "") leads with
// every listed node reachable, and returns the list.
func (e *e2e) waitLeader(d time.Duration, want string) nodeListJSON {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		lj := e.nodeList()
		ok := lj.Leader != "" && (want == "" || lj.Leader == want)
		for _, n := range lj.Nodes {
			ok = ok && n.Reachable
		}
		if ok {
			return lj
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("leader %q (want %q) with every node reachable not within %v: %+v", lj.Leader, want, d, lj)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// e2eCluster is a 3-node cluster of the binary under test on loopback.
type e2eCluster struct {
	e       *e2e // TICKETING_ADDR is every node's client address
	nodes   map[string]*proc
	clients []string         // n1, n2, n3's client addresses
	addr    func(int) string // the i-th of the ports reserved: 0-5 are the nodes', 6.. the caller's
}

// startE2ECluster starts n1-n3 (--bootstrap, client and peer ports from
// the 6+extra reserved) and logs their stderr when the test fails. The
// caller waits for a leader.
func startE2ECluster(t *testing.T, extra int) *e2eCluster {
	t.Helper()
	bin := ticketingBin(t)
	ports := freePorts(t, 6+extra)
	c := &e2eCluster{nodes: map[string]*proc{}, addr: func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }}
	ids := []string{"n1", "n2", "n3"}
	var peers []string
	for i, id := range ids {
		c.clients = append(c.clients, c.addr(2*i))
		peers = append(peers, id+"="+c.addr(2*i+1))
	}
	c.e = newWorld(t, bin, strings.Join(c.clients, ","))
	for i, id := range ids {
		c.nodes[id] = c.e.start("", "serve", "--node-id", id, "--listen", c.clients[i], "--peer-listen", c.addr(2*i+1),
			"--peers", strings.Join(peers, ","), "--bootstrap", "--log-level", "warn")
	}
	t.Cleanup(func() {
		if t.Failed() {
			for id, p := range c.nodes {
				t.Logf("--- %s stderr:\n%s", id, tail(p.err.String(), 30))
			}
		}
	})
	return c
}

func TestE2ECluster(t *testing.T) {
	c := startE2ECluster(t, 2) // then n4: client and peer port
	e, nodes, clients, addr := c.e, c.nodes, c.clients, c.addr
	ids := []string{"n1", "n2", "n3"}

	// health exits 0 once a leader serves with verified clocks and every
	// member's address is known.
	e.eventually(45*time.Second, 0, "health", "--timeout", "2s")

	// node list: 3 voters, one leader, all reachable, lag known.
	lj := e.waitLeader(10*time.Second, "")
	if len(lj.Nodes) != 3 || lj.Term == 0 || lj.CommitIndex == 0 {
		t.Fatalf("node list: %+v", lj)
	}
	leaders := 0
	for i, n := range lj.Nodes {
		if n.ID != ids[i] || n.ClientAddr != clients[i] || !n.Voter || !n.Member || n.Lag < 0 || n.AppliedIndex == 0 {
			t.Errorf("node %+v", n)
		}
		if n.Role == "leader" {
			leaders++
			if n.ID != lj.Leader {
				t.Errorf("leader row %s, list names %s", n.ID, lj.Leader)
			}
		}
	}
	if leaders != 1 {
		t.Fatalf("%d leaders: %+v", leaders, lj)
	}
	p := e.expect(0, "node", "list")
	if !strings.HasPrefix(p.out.String(), "ID  CLIENT ADDR") || strings.Count(p.out.String(), "\n") != 4 {
		t.Errorf("node list:\n%s", p.out.String())
	}

	// health as JSON; clock-skew within the default bound on loopback.
	p = e.expect(0, "health", "-o", "json")
	var hj clusterHealthJSON
	if err := json.Unmarshal([]byte(p.out.String()), &hj); err != nil || !hj.Healthy || hj.Voters != 3 || hj.VotersHealthy != 3 {
		t.Errorf("health json %v: %s", err, p.out.String())
	}
	p = e.expect(0, "clock-skew", "--samples", "3")
	if !strings.Contains(p.out.String(), "clock skew ok") || strings.Count(p.out.String(), "this host") != 3 {
		t.Errorf("clock-skew:\n%s", p.out.String())
	}

	// A lock taken and released through a follower's address: the client
	// follows M to the leader.
	follower := lj.follower()
	tok := e.token(e.expect(0, "acquire", "--addr", follower.ClientAddr, "e2e/cluster", "--lease", "30s"))
	e.expect(6, "release", "--addr", follower.ClientAddr, "e2e/cluster", strconv.FormatUint(tok-1, 10))
	e.expect(0, "release", "--addr", follower.ClientAddr, "e2e/cluster", strconv.FormatUint(tok, 10))

	// #12 item 14: locks and status read from the leader, and say so.
	for _, n := range lj.Nodes {
		if n.ID == lj.Leader {
			e2eReadsFromLeader(t, e, n, follower)
		}
	}

	// #12 item 7: bench given a follower drives the leader and counts grants.
	bp := e.expect(0, "bench", "--addr", follower.ClientAddr, "--duration", "0.5s", "--conns", "1", "--pipeline", "1", "--keys", "10", "--progress=false", "-o", "json")
	var br struct {
		Addr     string            `json:"addr"`
		Outcomes map[string]uint64 `json:"outcomes"`
	}
	if err := json.Unmarshal([]byte(bp.out.String()), &br); err != nil || br.Addr == follower.ClientAddr || br.Outcomes["G"] == 0 {
		t.Errorf("bench through a follower: %v: addr %s outcomes %v", err, br.Addr, br.Outcomes)
	}

	e2eTransferUnknownID(t, e, lj.Leader)

	// transfer-leader to that follower, sent to the old leader's follower
	// address list alike.
	p = e.expect(0, "node", "transfer-leader", "--id", follower.ID)
	if got := strings.TrimSpace(p.out.String()); got != "leader "+follower.ClientAddr {
		t.Errorf("transfer-leader printed %q, want leader %s", got, follower.ClientAddr)
	}
	e.waitLeader(15*time.Second, follower.ID)
	e.eventually(20*time.Second, 0, "health", "--timeout", "2s")

	// #12 item 7: bench across a leader change, and on a follower.
	e2eBenchLeaderChange(t, e)
	e.eventually(20*time.Second, 0, "health", "--timeout", "2s")

	// Add n4 (started with --join) as a voter: 4 voters at runtime.
	n4c, n4p := addr(6), addr(7)
	nodes["n4"] = e.start("", "serve", "--node-id", "n4", "--listen", n4c, "--peer-listen", n4p, "--join", "--log-level", "warn")
	e.eventually(20*time.Second, 0, "ping", "--addr", n4c, "--count", "1", "--timeout", "1s")
	p = e.expect(0, "node", "add", "--id", "n4", "--peer-addr", n4p, "--client-addr", n4c, "--voter")
	if !regexp.MustCompile(`(?m)^n4\s+` + regexp.QuoteMeta(n4c) + `\s+` + regexp.QuoteMeta(n4p) + `\s+\S+\s+yes\b`).MatchString(p.out.String()) {
		t.Errorf("node add printed:\n%s", p.out.String())
	}
	lj = e.nodeList()
	if len(lj.Nodes) != 4 || lj.Nodes[3].ID != "n4" || !lj.Nodes[3].Voter || !lj.Nodes[3].Reachable {
		t.Errorf("after add: %+v", lj)
	}
	p = e.expect(2, "node", "add", "--id", "n4", "--peer-addr", n4p, "--client-addr", n4c)
	oneStderrLine(t, p)
	if !strings.Contains(p.err.String(), "already a member") {
		t.Errorf("adding twice: %s", p.err.String())
	}
	p = e.expect(0, "node", "remove", "--id", "n4")
	if strings.Contains(p.out.String(), "n4") {
		t.Errorf("after remove:\n%s", p.out.String())
	}
	nodes["n4"].kill9(t)
	if lj = e.nodeList(); len(lj.Nodes) != 3 {
		t.Errorf("after remove: %+v", lj)
	}
	// #12 item 15: n4's address, no longer a member, in --addr.
	e2eHealthNotMember(t, e, clients, n4c)
	e.expect(2, "node", "remove", "--id", "n4")

	// A follower dies: health fails, naming it; the survivors still grant.
	lj = e.waitLeader(15*time.Second, "")
	victim := lj.follower()
	nodes[victim.ID].kill9(t)
	p = e.run("health", "--timeout", "2s")
	if p.code != ExitBusy || !strings.Contains(p.out.String(), "FAIL "+victim.ID+" ("+victim.ClientAddr+"): unreachable") {
		t.Errorf("health with %s killed: exit %d\n%s%s", victim.ID, p.code, p.out.String(), p.err.String())
	}
	p = e.run("health", "-o", "json", "--timeout", "2s")
	if err := json.Unmarshal([]byte(p.out.String()), &hj); err != nil || hj.Healthy || p.code != ExitBusy {
		t.Errorf("health json with %s killed: %v %s", victim.ID, err, p.out.String())
	}
	e.token(e.expect(0, "acquire", "e2e/after-kill", "--lease", "5s", "--wait", "5s"))

	// The leader dies too: one of three voters left, no leader.
	if lj = e.nodeList(); lj.Leader == "" || nodes[lj.Leader] == nil {
		t.Fatalf("no leader to kill: %+v", lj)
	}
	nodes[lj.Leader].kill9(t)
	e2eNoLeaderElected(t, e)
}

// processRunning: pid exists and is not a zombie.
func processRunning(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) < 3 || f[2] != "Z"
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freeBase finds a base port whose next n ports are free.
func freeBase(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := 20000 + rand.IntN(40000)
		ok := true
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

func TestE2EClusterLocalScript(t *testing.T) {
	bin := ticketingBin(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	script, err := filepath.Abs("../../scripts/cluster-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	base := freeBase(t, 6)
	state := t.TempDir()
	e := newWorld(t, bin, "")
	e.env = append(e.env, "TICKETING_BIN="+bin, "TICKETING_CLUSTER_DIR="+state, "TICKETING_CLUSTER_PORT="+strconv.Itoa(base))
	sh := func(args ...string) *proc {
		t.Helper()
		p := &proc{done: make(chan struct{})}
		p.cmd = exec.Command(bash, append([]string{script}, args...)...)
		p.cmd.Env = e.env
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
		if err := p.cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				p.code = ee.ExitCode()
			} else {
				t.Fatal(err)
			}
		}
		return p
	}
	pids := func() []int {
		var out []int
		files, _ := filepath.Glob(filepath.Join(state, "n*.pid"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				out = append(out, pid)
			}
		}
		return out
	}
	t.Cleanup(func() {
		sh("stop")
		for _, pid := range pids() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	want := fmt.Sprintf("export TICKETING_ADDR=127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d\n", base, base+2, base+4)
	p := sh("start")
	if p.code != 0 || !strings.HasSuffix(p.out.String(), want) {
		t.Fatalf("start: exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
	started := pids()
	if len(started) != 3 {
		t.Fatalf("pid files: %v", started)
	}
	// Idempotent: a second start changes nothing.
	if p = sh("start", "3"); p.code != 0 || !strings.HasSuffix(p.out.String(), want) || fmt.Sprint(pids()) != fmt.Sprint(started) {
		t.Errorf("second start: exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
	if p = sh("start", "5"); p.code == 0 {
		t.Errorf("start 5 while 3 run: exit 0")
	}
	if p = sh("status"); p.code != 0 || strings.Count(p.out.String(), "running (pid") != 3 || !strings.Contains(p.out.String(), "leader") {
		t.Errorf("status: exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
	e.env = append(e.env, "TICKETING_ADDR="+strings.TrimSpace(strings.TrimPrefix(want, "export TICKETING_ADDR=")))
	e.token(e.expect(0, "acquire", "script/key", "--lease", "5s"))

	// #12 item 16: start with a dead node does not report all running.
	// In memory, the node cannot rejoin under its id: start refuses, why.
	pidOf := func(id string) int {
		b, _ := os.ReadFile(filepath.Join(state, id+".pid"))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid
	}
	kill9 := func(id string) {
		pid := pidOf(id)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitFor(t, 10*time.Second, func() bool { return !processRunning(pid) }, id+" to end after SIGKILL")
	}
	kill9("n2")
	if p = sh("start"); p.code == 0 || strings.Contains(p.out.String(), "export TICKETING_ADDR") ||
		!strings.Contains(p.err.String(), "n2 not running") || !strings.Contains(p.err.String(), "cannot rejoin under its id") {
		t.Errorf("start with n2 dead (in memory): exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}

	if p = sh("stop"); p.code != 0 {
		t.Errorf("stop: exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
	for _, pid := range started {
		if processRunning(pid) {
			t.Errorf("pid %d still running after stop", pid)
		}
	}
	if p = sh("stop"); p.code != 0 || !strings.Contains(p.out.String(), "not running") {
		t.Errorf("second stop: exit %d\n%s", p.code, p.out.String())
	}
	if p = sh("status"); p.code != 3 {
		t.Errorf("status when stopped: exit %d", p.code)
	}

	// --durable: start restarts the dead node from its data, and the
	// cluster is whole again.
	if p = sh("start", "--durable"); p.code != 0 {
		t.Fatalf("start --durable: exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
	old := pidOf("n2")
	kill9("n2")
	if p = sh("start"); p.code != 0 || !strings.HasSuffix(p.out.String(), want) || !strings.Contains(p.err.String(), "n2 was not running: restarting it") {
		t.Errorf("start with n2 dead (durable): exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
	if pid := pidOf("n2"); pid == old || !processRunning(pid) {
		t.Errorf("n2 not restarted: pid %d (was %d)", pid, old)
	}
	if p = sh("status"); p.code != 0 || strings.Count(p.out.String(), "running (pid") != 3 {
		t.Errorf("status after the restart: exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
	if p = sh("stop"); p.code != 0 {
		t.Errorf("stop: exit %d\n%s%s", p.code, p.out.String(), p.err.String())
	}
}

// scripts/bench-cluster.sh runs end to end (one short run): it is how
// docs/benchmarks.md's cluster figures are made, so it must not rot. No
// figure is asserted, only that both targets were measured and every node's
// RSS reported.
func TestE2EBenchClusterScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs a cluster: not in -short")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	script, err := filepath.Abs("../../scripts/bench-cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	state, out := t.TempDir(), t.TempDir()
	t.Cleanup(func() { // reap the nodes should the script have died
		files, _ := filepath.Glob(filepath.Join(state, "n*.pid"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	cmd := exec.Command(bash, script, "-n", "1", "-d", "1s", "-w", "200ms", "-o", out, "3")
	cmd.Env = append(depCleanEnv(), "TICKETING_CLUSTER_DIR="+state, "TICKETING_CLUSTER_PORT="+strconv.Itoa(freeBase(t, 6)))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench-cluster.sh: %v\n%s", err, b)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| cluster-3-nodes | 1 |", "| single-node | 1 |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	rss, _ := os.ReadFile(filepath.Join(out, "rss.txt"))
	if n := strings.Count(string(rss), " MB"); n != 3 || !strings.Contains(string(rss), "(leader)") {
		t.Errorf("want the peak RSS of 3 nodes, one the leader:\n%s", rss)
	}
}
