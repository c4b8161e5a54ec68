package deploy

import (
	"fmt"
	"testing"
)

func TestDeployLayout(t *testing.T) {
	nodes, err := layoutNodes([]string{"a", "a:9000", "a", "b", "[::1]:7000"}, 7470, 7471, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, n := range nodes {
		got += fmt.Sprintf("%s=%s:%d/%d ", n.ID, n.Host, n.ClientPort, n.PeerPort)
	}
	want := "n1=a:7470/7471 n2=a:9000/9001 n3=a:7472/7473 n4=b:7470/7471 n5=::1:7000/7001 "
	if got != want {
		t.Errorf("layout\n got %s\nwant %s", got, want)
	}
	// compose: one docker host, so distinct names still get distinct ports.
	nodes, _ = layoutNodes([]string{"x", "y", "z"}, 7470, 7471, nil, true)
	if nodes[0].ClientPort == nodes[1].ClientPort || nodes[1].ClientPort == nodes[2].ClientPort {
		t.Errorf("compose layout reuses a port: %+v", nodes)
	}
	if bindHost("10.0.0.1") != "0.0.0.0" || bindHost("127.0.0.2") != "127.0.0.2" || bindHost("fd00::1") != "::" {
		t.Error("bindHost")
	}
}
