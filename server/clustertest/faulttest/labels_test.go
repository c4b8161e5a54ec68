package faulttest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client"
	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/clustertest"
)

// lockRow is key's row in p's `locks` (ok false: not listed).
func lockRow(t *testing.T, p *clustertest.Proc, key string) (wire.LockEntry, bool) {
	t.Helper()
	var lr wire.LocksReply
	if err := p.Query(wire.CmdLocks, map[string]any{"prefix": key, "limit": 10}, &lr); err != nil {
		t.Logf("locks on %s: %v", p.ID, err)
		return wire.LockEntry{}, false
	}
	for _, l := range lr.Locks {
		if l.Key == key {
			return l, true
		}
	}
	return wire.LockEntry{}, false
}

// newLeader waits until a member other than old serves and can grant.
func newLeader(t *testing.T, c *clustertest.ProcCluster, old *clustertest.Proc) *clustertest.Proc {
	t.Helper()
	var nl *clustertest.Proc
	eventually(t, 30*time.Second, "a new leader able to grant", func() bool {
		if p := c.Leader(); p != nil && p != old {
			if st, err := p.Status(); err == nil && st.CanGrant {
				nl = p
				return true
			}
		}
		return false
	})
	return nl
}

// TestLabelsSurviveLeaderChanges (issue 30 item 2, protocol.md §12.3): a
// labelled client holds a lock and a key set; after a leadership transfer
// and after the new leader is killed, `locks` on the leader that follows
// (and on every member) names the same holder label and address for the
// locks that survived, and a lock taken on the second leader keeps its
// label through that leader's SIGKILL. Before the labels were replicated
// the holder's label read "" on any node but the granting leader.
func TestLabelsSurviveLeaderChanges(t *testing.T) {
	needBinary(t)
	c := clustertest.StartProcs(t, bin, 3, clustertest.ProcOptions{})
	l1 := c.WaitReady(30 * time.Second)
	const label = "billing-7/4242 go/test"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.Dial(ctx, c.ClientAddrs(), client.WithLabel(label))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	single, err := cl.Acquire(ctx, "lab/one", time.Minute, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire lab/one: %v", err)
	}
	set, err := cl.AcquireSet(ctx, []string{"lab/s1", "lab/s2"}, time.Minute, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire set: %v", err)
	}
	row, ok := lockRow(t, l1, "lab/one")
	if !ok || row.Holder == nil || row.Holder.Label != label || row.Holder.Addr == "" {
		t.Fatalf("locks on the granting leader %s: %+v", l1.ID, row)
	}
	addr := row.Holder.Addr

	// expect: on p, key is held under token by the labelled client
	expect := func(p *clustertest.Proc, key string, token uint64, addr string) {
		t.Helper()
		var last wire.LockEntry
		eventually(t, 20*time.Second, p.ID+" lists "+key+" with its holder's label", func() bool {
			r, ok := lockRow(t, p, key)
			last = r
			return ok && r.Token == token && r.Holder != nil && r.Holder.Label == label && (addr == "" || r.Holder.Addr == addr)
		})
		if last.Holder.Addr == "" {
			t.Errorf("%s: %s's holder has no address", p.ID, key)
		}
	}

	// 1. a clean transfer
	var lr wire.LeaderReply
	if err := c.LeaderQuery(30*time.Second, wire.CmdTransferLeader, nil, &lr); err != nil {
		t.Fatalf("transfer-leader: %v", err)
	}
	l2 := newLeader(t, c, l1)
	t.Logf("leadership moved %s → %s", l1.ID, l2.ID)
	for _, p := range c.Members() {
		expect(p, "lab/one", single.Token(), addr)
		expect(p, "lab/s2", set.Token(), addr)
	}
	if r, _ := lockRow(t, l2, "lab/s1"); !slices.Equal(r.Set, []string{"lab/s1", "lab/s2"}) {
		t.Errorf("the set's row on %s: %+v", l2.ID, r)
	}

	// a lock taken on the second leader (the client follows it)
	second, err := cl.Acquire(ctx, "lab/two", time.Minute, 10*time.Second)
	if err != nil {
		t.Fatalf("acquire lab/two: %v", err)
	}
	expect(l2, "lab/two", second.Token(), "")

	// 2. the second leader dies
	l2.Kill()
	t.Logf("SIGKILL %s", l2.ID)
	l3 := newLeader(t, c, l2)
	t.Logf("%s leads", l3.ID)
	expect(l3, "lab/one", single.Token(), addr)
	expect(l3, "lab/s1", set.Token(), addr)
	expect(l3, "lab/two", second.Token(), "")

	// released through the new leader: every key free, the labels gone with them
	for _, lk := range []*client.Lock{single, set, second} {
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("release %v: %v", lk.Keys(), err)
		}
	}
	for _, k := range []string{"lab/one", "lab/s1", "lab/s2", "lab/two"} {
		if r, ok := lockRow(t, l3, k); ok {
			t.Errorf("%s still listed after the release: %+v", k, r)
		}
	}
}

// TestLabelSentAgainToARegainedLeader: a leader's LeaderStart lets go of
// the labels of connections that hold nothing, so a connection must send
// its label again in each serving term of its node (Node.ServeEpoch). One
// labelled connection to n1 locks and unlocks (its label replicated), the
// leadership goes to another node and back to n1, and a lock the same
// connection then takes shows its label on every member. Fails when the
// label is sent once per connection only.
func TestLabelSentAgainToARegainedLeader(t *testing.T) {
	needBinary(t)
	c := clustertest.StartProcs(t, bin, 3, clustertest.ProcOptions{})
	l1 := c.WaitReady(30 * time.Second)
	const label = "regained/1 go/test"
	r := rawTo(t, l1)
	if resp, err := r.Do(5*time.Second, func(b []byte, id uint32) []byte { return wire.AppendLabel(b, id, label) }); err != nil || resp.Status != wire.StatusReleased {
		t.Fatalf("L: %v %s", err, describe(resp))
	}
	g, err := r.Acquire("regain/one", time.Minute, 0)
	if err != nil || g.Status != wire.StatusGranted {
		t.Fatalf("acquire regain/one: %v %s", err, describe(g))
	}
	if resp, err := r.Release("regain/one", g.Value); err != nil || resp.Status != wire.StatusReleased {
		t.Fatalf("release regain/one: %v %s", err, describe(resp))
	}
	var lr wire.LeaderReply
	if err := c.LeaderQuery(30*time.Second, wire.CmdTransferLeader, nil, &lr); err != nil {
		t.Fatalf("transfer-leader: %v", err)
	}
	l2 := newLeader(t, c, l1)
	if err := c.LeaderQuery(30*time.Second, wire.CmdTransferLeader, map[string]any{"id": l1.ID}, &lr); err != nil {
		t.Fatalf("transfer-leader back to %s: %v", l1.ID, err)
	}
	if back := newLeader(t, c, l2); back != l1 {
		t.Fatalf("%s leads, want %s", back.ID, l1.ID)
	}
	t.Logf("leadership %s → %s → %s", l1.ID, l2.ID, l1.ID)
	g2, err := r.Acquire("regain/two", time.Minute, 0)
	if err != nil || g2.Status != wire.StatusGranted {
		t.Fatalf("acquire regain/two on the same connection: %v %s", err, describe(g2))
	}
	for _, p := range c.Members() {
		eventually(t, 20*time.Second, p.ID+" names regain/two's holder by its label", func() bool {
			row, ok := lockRow(t, p, "regain/two")
			return ok && row.Token == g2.Value && row.Holder != nil && row.Holder.Label == label
		})
	}
	if resp, err := r.Release("regain/two", g2.Value); err != nil || resp.Status != wire.StatusReleased {
		t.Fatalf("release regain/two: %v %s", err, describe(resp))
	}
}
