package faulttest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/clustertest"
)

// TestRemovedWhileCutOff: a follower removed from the configuration while it
// was isolated learns it after the links heal (issue #13 item 4): it logs
// once that it was removed, reports role "removed" (can_grant false, the
// reason named), answers an acquire B NO_QUORUM instead of M with no
// address, and `health` / `node list` on it say removed.
func TestRemovedWhileCutOff(t *testing.T) {
	needBinary(t)
	c := clustertest.StartProcs(t, bin, 3, clustertest.ProcOptions{})
	l := c.WaitReady(20 * time.Second)
	var f *clustertest.Proc
	for _, p := range c.Members() {
		if p != l {
			f = p
			break
		}
	}
	c.Net.Isolate(f.ID)
	if err := c.RemoveNode(f.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %s while it was isolated", f.ID)
	c.Net.Heal()

	var st wire.StatusReply
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err = f.Status(); err == nil && st.Role == wire.NodeRemoved {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.Role != wire.NodeRemoved {
		t.Fatalf("%s never learned it was removed: role %q (%v); logs:\n%s", f.ID, st.Role, err, f.Logs(20))
	}
	t.Logf("%s status: role %s, can_grant %v, reason %q", f.ID, st.Role, st.CanGrant, st.Reason)
	if st.CanGrant || !strings.Contains(st.Reason, "removed") {
		t.Errorf("status of the removed node: can_grant %v reason %q, want false naming the removal", st.CanGrant, st.Reason)
	}
	r, err := rawTo(t, f).Acquire("removed-k", 5*time.Second, 0)
	if err != nil || r.Status != wire.StatusBusy || r.Code != wire.CodeNoQuorum {
		t.Errorf("acquire on the removed node: %v %s, want B NO_QUORUM", err, describe(r))
	}
	time.Sleep(2 * time.Second) // a few more probe rounds: still logged once
	if n := strings.Count(f.Logs(1000), "was removed from the cluster configuration"); n != 1 {
		t.Errorf("the removal was logged %d times, want once", n)
	}

	out, err := exec.Command(bin, "health", "--addr", f.Client).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "removed from the cluster configuration") {
		t.Errorf("health of the removed node: %v, want a failure naming the removal; output %q", err, out)
	}
	t.Logf("health: %s", strings.TrimSpace(string(out)))
	addrs := append(c.ClientAddrs(), f.Client)
	out, err = exec.Command(bin, "node", "list", "--addr", strings.Join(addrs, ",")).CombinedOutput()
	t.Logf("node list (%v):\n%s", err, out)
	found := false
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, f.Client) && strings.Contains(line, wire.NodeRemoved) {
			found = true
		}
	}
	if !found {
		t.Errorf("node list does not show %s (%s) as removed", f.ID, f.Client)
	}
}
