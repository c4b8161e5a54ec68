package testkit

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	bin := filepath.Join(t.TempDir(), "ticketing")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/ticketing/ticketing/cmd/ticketing")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	peerPort = func() (string, error) {
		calls++
		if calls == 1 {
			return taken.Addr().String(), nil
		}
		return freePort()
	}
	defer func() { peerPort = freePort }()

	e, err := StartEnv("cluster", bin, t.TempDir())
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
