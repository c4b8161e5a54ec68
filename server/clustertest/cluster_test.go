package clustertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	"github.com/ticketing/ticketing/server/servertest"
)

func TestClusterAcquireReleaseAndMoved(t *testing.T) {
	// One leader throughout: 1 s raft timings, so that a loaded CI machine
	// (every package at once on 2 cores) does not change it mid-test.
	c := Start(t, 3, Options{Mutate: func(_ int, cfg *server.Config) {
		cfg.Cluster.HeartbeatTimeout, cfg.Cluster.ElectionTimeout, cfg.Cluster.LeaderLeaseTimeout = time.Second, time.Second, time.Second
	}})
	l := c.WaitClockHealthy(10 * time.Second)
	cc := servertest.Dial(t, l.Client, servertest.Options{})
	r := cc.Acquire("k", 10000, 0)
	if r.Status != wire.StatusGranted {
		t.Fatalf("acquire on leader: %s", servertest.Describe(r))
	}
	tok := r.Value
	if r2 := cc.Acquire("k", 10000, 0); r2.Status != wire.StatusTimeout {
		t.Fatalf("second acquire: %s", servertest.Describe(r2))
	}
	for _, n := range c.Nodes {
		if n == l {
			continue
		}
		fc := servertest.Dial(t, n.Client, servertest.Options{})
		// A follower that has not heard from the new leader yet answers
		// M with no address (allowed, protocol.md §7); it must name the
		// leader soon after.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := fc.Acquire("k", 10000, 0)
			if r.Status == wire.StatusMoved && string(r.Payload) == l.Client {
				break
			}
			if r.Status != wire.StatusMoved || len(r.Payload) != 0 || time.Now().After(deadline) {
				t.Fatalf("follower %s: %s, want M %s", n.ID, servertest.Describe(r), l.Client)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if r := cc.Release("k", tok); r.Status != wire.StatusReleased {
		t.Fatalf("release: %s", servertest.Describe(r))
	}
	r = cc.Acquire("k", 10000, 0)
	if r.Status != wire.StatusGranted || r.Value <= tok {
		t.Fatalf("reacquire: %s (prev token %d)", servertest.Describe(r), tok)
	}
}

// TestInProcessWorkloadAndTransfers runs the checked workload against an
// in-process cluster while leadership moves (transfer-leader), then checks
// the history and that every state machine holds the same table.
func TestInProcessWorkloadAndTransfers(t *testing.T) {
	c := Start(t, 3, Options{})
	c.WaitClockHealthy(10 * time.Second)
	w := &Workload{Addrs: c.ClientAddrs(), Lease: time.Second, Wait: time.Second}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	// Three transfers must succeed (a refused one, e.g. a target still
	// catching up, is retried; 20 attempts bound the loop): a run in which
	// leadership never moved proves nothing about transfers.
	moved := 0
	for attempt := 0; moved < 3 && attempt < 20; attempt++ {
		time.Sleep(300 * time.Millisecond)
		l := c.WaitLeader(10 * time.Second)
		if err := l.Srv.ClusterNode().TransferLeader(""); err != nil {
			t.Logf("transfer: %v", err)
			continue
		}
		moved++
	}
	time.Sleep(300 * time.Millisecond)
	if err := w.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if moved < 3 {
		t.Errorf("only %d of 3 leadership transfers succeeded", moved)
	}
	t.Logf("history: %s; errors %v", w.H.Summary(), w.Errors())
	v, notes := w.H.Violations(time.Minute, "")
	for _, n := range notes {
		t.Log(n)
	}
	for _, x := range v {
		t.Error(x)
	}
	for _, r := range w.F.Rejected() {
		t.Error(r)
	}
	if w.H.Counts()["A granted"] == 0 {
		t.Error("no acquire succeeded")
	}
	c.WaitSameDigest(20 * time.Second)
}

// The in-memory raft log is bounded by bytes: every node snapshots (and so
// compacts its log) once SnapshotBytes of log were applied since its last
// snapshot, long before raft's own entry-count backstop (8,192 entries).
func TestSnapshotsBoundTheLogByBytes(t *testing.T) {
	const floor = 64 << 10
	c := Start(t, 3, Options{Mutate: func(_ int, cfg *server.Config) { cfg.Cluster.SnapshotBytes = floor }})
	l := c.WaitClockHealthy(10 * time.Second)
	cc := servertest.Dial(t, l.Client, servertest.Options{})
	key := strings.Repeat("k", 240)
	// About 1,000 entries of ~400 bytes each: 6× the floor, an eighth of
	// raft's backstop. A leader change on a loaded machine answers U or M:
	// follow the new leader and go on with the next key (each key is used
	// once, so an undecided one changes nothing); a few such changes are
	// tolerated, more fail the test.
	done, changes := 0, 0
	for i := 0; done < 500; i++ {
		k := fmt.Sprintf("%s%04d", key, i)
		r := cc.Acquire(k, 10000, 0)
		if r.Status == wire.StatusGranted {
			r = cc.Release(k, r.Value)
			if r.Status == wire.StatusReleased {
				done++
				continue
			}
		}
		if (r.Status != wire.StatusUnknown && r.Status != wire.StatusMoved) || changes == 5 {
			t.Fatalf("key %d: %s (after %d leader changes)", i, servertest.Describe(r), changes)
		}
		changes++
		t.Logf("key %d: %s: following the new leader", i, servertest.Describe(r))
		cc.Close()
		cc = servertest.Dial(t, c.WaitLeader(10*time.Second).Client, servertest.Options{})
	}
	c.WaitSameDigest(10 * time.Second)
	for _, n := range c.Running() {
		var since int64
		deadline := time.Now().Add(10 * time.Second)
		for {
			since, _ = n.Srv.ClusterNode().FSM().LogBytes()
			if since < floor || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		st := n.Srv.ClusterNode().Raft().Stats()
		if since >= floor || st["last_snapshot_index"] == "0" {
			t.Errorf("%s: %d bytes of log since the last snapshot (index %s, last log %s), want < %d", n.ID, since, st["last_snapshot_index"], st["last_log_index"], floor)
		}
	}
}
