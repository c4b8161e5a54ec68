// Package clustertest is the cluster test kit:
//
//   - Start: in-process clusters on loopback (each node its own
//     server.Server with a raft node), every node closed by t.Cleanup;
//   - StartProcs: clusters of real `ticketing serve` processes (ProcCluster)
//     with kill -9, SIGSTOP/SIGCONT, SIGTERM, restarts and membership
//     changes, their peer links behind a fault-injecting proxy (Net);
//   - Workload, History, Fence: concurrent lock clients whose operations
//     are recorded and checked with porcupine against a lock model, plus
//     token and mutual-exclusion checks (History.Violations);
//   - Raw: a protocol connection to one node for probes and admin queries.
//
// The process-level fault tests live in ./faulttest; docs/testing.md
// describes the suite.
package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/server"
	"github.com/ticketing/ticketing/server/cluster"
	"github.com/ticketing/ticketing/server/locktable"
)

// Node is one member of a test cluster.
type Node struct {
	ID     string
	Srv    *server.Server
	Cfg    server.Config
	Client string // client address
	Peer   string // peer address
}

// Cluster is a test cluster.
type Cluster struct {
	T     testing.TB
	Nodes []*Node
}

// Options tune a test cluster.
type Options struct {
	Token        string
	MaxClockSkew time.Duration
	Mutate       func(i int, cfg *server.Config) // per node, before start
}

// Start starts an n-node cluster (3 or 5) and waits for a serving leader.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{T: t}
	var peers []cluster.Peer
	type lns struct{ client, peer net.Listener }
	ls := make([]lns, n)
	for i := range n {
		cl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = lns{cl, pl}
		peers = append(peers, cluster.Peer{ID: fmt.Sprintf("n%d", i+1), Addr: pl.Addr().String()})
	}
	for i := range n {
		cfg := server.DefaultConfig()
		cfg.Listener = ls[i].client
		cfg.NodeID = peers[i].ID
		cfg.ClientToken = opts.Token
		cfg.Cluster = &server.ClusterConfig{
			PeerListener: ls[i].peer,
			Advertise:    ls[i].client.Addr().String(),
			Settings:     cluster.Settings{Peers: peers, Bootstrap: true, MaxClockSkew: opts.MaxClockSkew},
		}
		if opts.Mutate != nil {
			opts.Mutate(i, &cfg)
		}
		srv, err := server.Start(context.Background(), cfg)
		if err != nil {
			t.Fatalf("start %s: %v", peers[i].ID, err)
		}
		node := &Node{ID: peers[i].ID, Srv: srv, Cfg: cfg, Client: ls[i].client.Addr().String(), Peer: peers[i].Addr}
		c.Nodes = append(c.Nodes, node)
		t.Cleanup(func() { node.Stop() })
	}
	c.WaitLeader(10 * time.Second)
	return c
}

// Stop shuts the node down (idempotent).
func (n *Node) Stop() {
	if n.Srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.Srv.Shutdown(ctx)
	n.Srv = nil
}

// Leader returns the serving leader, or nil.
func (c *Cluster) Leader() *Node {
	for _, n := range c.Nodes {
		if n.Srv != nil && n.Srv.ClusterNode() != nil && n.Srv.ClusterNode().Serving() {
			return n
		}
	}
	return nil
}

// WaitLeader waits until a node serves as leader and returns it.
func (c *Cluster) WaitLeader(d time.Duration) *Node {
	c.T.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.T.Fatalf("no serving leader within %v", d)
	return nil
}

// WaitClockHealthy waits until the leader reports verified clocks.
func (c *Cluster) WaitClockHealthy(d time.Duration) *Node {
	c.T.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if l := c.Leader(); l != nil {
			if ok, _ := l.Srv.ClusterNode().ClockHealthy(); ok {
				return l
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.T.Fatalf("clock health not verified within %v", d)
	return nil
}

// Running returns the nodes that have not been stopped.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Srv != nil {
			out = append(out, n)
		}
	}
	return out
}

// ClientAddrs returns the client addresses of the running nodes.
func (c *Cluster) ClientAddrs() []string {
	var out []string
	for _, n := range c.Running() {
		out = append(out, n.Client)
	}
	return out
}

// WaitSameDigest waits (up to d) until every running node's state machine
// holds the same lock table and last token at the same applied index
// (FSM.StateDigest), and returns that table; it fails the test otherwise.
func (c *Cluster) WaitSameDigest(d time.Duration) locktable.State {
	c.T.Helper()
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		var first []byte
		same := true
		var st locktable.State
		for _, n := range c.Running() {
			f := n.Srv.ClusterNode().FSM()
			applied := f.Applied()
			s, tok := f.StateDigest()
			b, _ := json.Marshal(struct {
				Applied uint64
				Table   locktable.State
				Token   uint64
			}{applied, s, tok})
			if first == nil {
				first, st = b, s
			} else if !bytes.Equal(first, b) {
				same = false
				last = fmt.Sprintf("%s: %s\nvs %s", n.ID, b, first)
				break
			}
		}
		if same {
			return st
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.T.Fatalf("state machines differ after %v: %s", d, last)
	return locktable.State{}
}
