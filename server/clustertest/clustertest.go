// Package clustertest starts in-process Ticketing clusters on loopback for
// tests: N server processes' worth of state (each its own server.Server with
// a raft node), ports chosen by the OS, every node closed by t.Cleanup.
package clustertest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/server"
	"github.com/ticketing/ticketing/server/cluster"
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
			Peers:        peers,
			Bootstrap:    true,
			MaxClockSkew: opts.MaxClockSkew,
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
