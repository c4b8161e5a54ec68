package faulttest

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/clustertest"
)

// long reports whether the long version runs (TICKETING_LONG_FAULTS=1).
func long() bool { return os.Getenv("TICKETING_LONG_FAULTS") != "" }

// longRuns is how often the long version repeats each fault on each size
// (TICKETING_LONG_RUNS, default 10).
func longRuns() int {
	if n, err := strconv.Atoi(os.Getenv("TICKETING_LONG_RUNS")); err == nil && n > 0 {
		return n
	}
	return 10
}

// A fault is injected into a running cluster under load; it returns once
// the fault is over (healed, resumed, replaced) and a leader serves again.
type fault struct {
	name   string
	inject func(t *testing.T, c *clustertest.ProcCluster)
}

// timing of one run; the long version holds each phase longer.
type phases struct {
	before, during, after time.Duration
}

func runPhases() phases {
	if long() {
		return phases{before: 2 * time.Second, during: 4 * time.Second, after: 3 * time.Second}
	}
	return phases{before: time.Second, during: 2 * time.Second, after: 1500 * time.Millisecond}
}

var faults = []fault{
	{"kill-leader", func(t *testing.T, c *clustertest.ProcCluster) {
		ph := runPhases()
		l := c.WaitLeader(20 * time.Second)
		t.Logf("kill -9 leader %s", l.ID)
		l.Kill()
		c.WaitReady(30 * time.Second)
		time.Sleep(ph.during / 2)
		// In-memory nodes come back under a new id (runbook): add the
		// replacement as a voter, then remove the dead id.
		p, err := c.Replace(l)
		if err != nil {
			t.Fatalf("replace %s: %v", l.ID, err)
		}
		t.Logf("replaced %s by %s", l.ID, p.ID)
	}},
	{"pause-leader", func(t *testing.T, c *clustertest.ProcCluster) {
		ph := runPhases()
		l := c.WaitLeader(20 * time.Second)
		t.Logf("SIGSTOP leader %s", l.ID)
		l.Pause()
		time.Sleep(ph.during)
		l.Resume()
		t.Logf("SIGCONT %s", l.ID)
	}},
	{"partition-follower", func(t *testing.T, c *clustertest.ProcCluster) {
		ph := runPhases()
		l := c.WaitLeader(20 * time.Second)
		var f *clustertest.Proc
		for _, p := range c.Members() {
			if p != l {
				f = p
				break
			}
		}
		t.Logf("isolate follower %s (leader %s)", f.ID, l.ID)
		c.Net.Isolate(f.ID)
		time.Sleep(ph.during)
		c.Net.Heal()
	}},
	{"partition-leader", func(t *testing.T, c *clustertest.ProcCluster) {
		ph := runPhases()
		l := c.WaitLeader(20 * time.Second)
		t.Logf("isolate leader %s", l.ID)
		c.Net.Isolate(l.ID)
		time.Sleep(ph.during)
		expectLeaderAmong(t, c, others(c, l.ID))
		c.Net.Heal()
	}},
	{"partition-majority-minority", func(t *testing.T, c *clustertest.ProcCluster) {
		// The leader with a minority on one side, the majority on the other.
		ph := runPhases()
		l := c.WaitLeader(20 * time.Second)
		minority := []string{l.ID}
		var majority []string
		for _, p := range c.Members() {
			if p == l {
				continue
			}
			if len(minority) < (len(c.Members())-1)/2 {
				minority = append(minority, p.ID)
			} else {
				majority = append(majority, p.ID)
			}
		}
		t.Logf("partition %v | %v", minority, majority)
		c.Net.Partition(minority, majority)
		time.Sleep(ph.during)
		expectLeaderAmong(t, c, majority)
		c.Net.Heal()
	}},
	{"membership", func(t *testing.T, c *clustertest.ProcCluster) {
		learner, err := c.AddNode(false)
		if err != nil {
			t.Fatalf("add learner: %v", err)
		}
		voter, err := c.AddNode(true)
		if err != nil {
			t.Fatalf("add voter: %v", err)
		}
		t.Logf("added learner %s and voter %s", learner.ID, voter.ID)
		if err := c.RemoveNode(learner.ID); err != nil {
			t.Fatal(err)
		}
		learner.Kill()
		// Remove a follower, then the leader itself: the voter count
		// returns to what it was.
		l := c.WaitLeader(20 * time.Second)
		for _, p := range c.Members() {
			if p != l && p != voter {
				if err := c.RemoveNode(p.ID); err != nil {
					t.Fatal(err)
				}
				p.Kill()
				t.Logf("removed follower %s", p.ID)
				break
			}
		}
		l = c.WaitLeader(20 * time.Second)
		if _, err := c.AddNode(true); err != nil {
			t.Fatalf("add voter: %v", err)
		}
		if err := c.RemoveNode(l.ID); err != nil {
			t.Fatalf("remove leader %s: %v", l.ID, err)
		}
		t.Logf("removed leader %s", l.ID)
		c.WaitReady(30 * time.Second)
		l.Kill()
	}},
}

// TestFaults runs every fault on 3 and on 5 node processes under a
// concurrent workload and checks the history (porcupine lock model, token
// uniqueness and order, disjoint holders, the fenced resource) and that all
// nodes end with the same lock table. TICKETING_LONG_FAULTS=1 repeats each
// run TICKETING_LONG_RUNS times with longer phases.
func TestFaults(t *testing.T) {
	needBinary(t)
	runs := 1
	if long() {
		runs = longRuns()
	}
	for _, n := range []int{3, 5} {
		for _, f := range faults {
			if n == 3 && f.name == "partition-majority-minority" && !long() {
				continue // on 3 nodes the same as partition-leader
			}
			for r := range runs {
				name := fmt.Sprintf("%s/n%d", f.name, n)
				if runs > 1 {
					name += fmt.Sprintf("/run%d", r+1)
				}
				t.Run(name, func(t *testing.T) { faultRun(t, n, f) })
			}
		}
	}
}

func faultRun(t *testing.T, n int, f fault) { faultRunSets(t, n, f, 0) }

// faultRunSets is faultRun with a share sets of the acquires taking key
// sets of 2 keys (clustertest.Workload.Sets).
func faultRunSets(t *testing.T, n int, f fault, sets float64) {
	ph := runPhases()
	c := clustertest.StartProcs(t, bin, n, clustertest.ProcOptions{})
	w := &clustertest.Workload{
		Addrs: c.ClientAddrs(),
		Lease: time.Second,
		Wait:  time.Second,
		Hold:  20 * time.Millisecond,
		Sets:  sets,
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = w.Stop(time.Minute)
		}
	}()
	time.Sleep(ph.before)
	f.inject(t, c)
	faultEnd := w.H.Now()
	t.Logf("fault over at %v", faultEnd)
	c.WaitReady(30 * time.Second)
	t.Logf("leader ready at %v", w.H.Now())
	time.Sleep(ph.after)
	// Liveness: the workload got locks again after the fault.
	deadline := time.Now().Add(20 * time.Second)
	for grantsAfter(w.H, faultEnd) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	stopped = true
	if err := w.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if grantsAfter(w.H, faultEnd) == 0 {
		t.Errorf("no acquire succeeded within 20s after the fault ended")
	}
	t.Logf("workload stopped at %v", w.H.Now())
	checkHistory(t, w)
	t.Logf("history checked at %v", w.H.Now())
	if sets > 0 {
		n := 0
		for _, o := range w.H.Ops() {
			if o.Keys != nil && o.Kind == 'A' && o.Outcome == clustertest.Granted {
				n++
			}
		}
		t.Logf("%d key sets granted", n)
		if n == 0 {
			t.Error("no key set was granted: the run checked single keys only")
		}
	}
	c.WaitSameTables(30 * time.Second)
	t.Logf("same tables at %v", w.H.Now())
}

// others returns the ids of the members other than id.
func others(c *clustertest.ProcCluster, id string) []string {
	var out []string
	for _, p := range c.Members() {
		if p.ID != id {
			out = append(out, p.ID)
		}
	}
	return out
}

// expectLeaderAmong checks (waiting up to 20 s) that a node of ids serves
// as leader: the majority side of a partition elected one.
func expectLeaderAmong(t *testing.T, c *clustertest.ProcCluster, ids []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range ids {
			st, err := c.Node(id).Status()
			if err == nil && st.Role == wire.NodeLeader && st.Leader == c.Node(id).Client {
				t.Logf("%s leads the majority side", id)
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("no node of %v serves as leader during the partition", ids)
}

func grantsAfter(h *clustertest.History, at time.Duration) int { return h.GrantsAfter(at) }

// checkHistory runs every history check and reports violations.
func checkHistory(t *testing.T, w *clustertest.Workload) {
	t.Helper()
	w.Check(t, os.Getenv("TICKETING_FAULT_LOGDIR"))
}
