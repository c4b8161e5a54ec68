package testkit_test

import (
	"net"
	"strings"
	"testing"

	"github.com/ticketing/ticketing/client/testkit"
)

// TestClusterStartRetriesATakenPeerPort: a peer port taken between the
// reservation and the node's bind (another process, or a node's own
// --listen :0) fails that start with "address already in use"; the
// environment starts again on fresh ports instead of failing every cluster
// cell of the run.
func TestClusterStartRetriesATakenPeerPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	bin, _ := build(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	defer testkit.SetPeerPort(func() (string, error) {
		calls++
		if calls == 1 {
			return taken.Addr().String(), nil
		}
		return testkit.FreePort()
	})()

	e, err := testkit.StartEnv("cluster", bin, t.TempDir())
	if err != nil {
		t.Fatalf("cluster did not start after a taken peer port: %v", err)
	}
	defer e.Close()
	if calls != 6 {
		t.Fatalf("peer ports reserved %d times, want 6 (one failed start of 3 nodes, one good one)", calls)
	}
	if len(e.Addrs) != 3 {
		t.Fatalf("addresses %v, want 3", e.Addrs)
	}
	for _, a := range e.Addrs {
		if strings.HasSuffix(a, taken.Addr().String()) {
			t.Fatalf("a node serves on the taken port: %v", e.Addrs)
		}
	}
}
