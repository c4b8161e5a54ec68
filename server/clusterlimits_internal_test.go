package server

import (
	"testing"

	"github.com/ticketing/ticketing/server/cluster"
)

// A cluster's one replicated table gets the whole idle key cache
// (Config.IdleKeyCache, in all): a single node splits it over its shards, and
// the cluster's table used to get one shard's share (1,024 of 16,384), so
// with more distinct keys in use than that nearly every release deleted its
// key and the next acquire inserted it again, on every node (issue 35).
func TestClusterTableGetsTheWholeIdleCache(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeID = "n1"
	cfg.Cluster = &ClusterConfig{PeerListen: "127.0.0.1:0", Advertise: "127.0.0.1:7470",
		Settings: cluster.Settings{Peers: []cluster.Peer{{ID: "n1", Addr: "127.0.0.1:1"}, {ID: "n2", Addr: "127.0.0.1:2"}, {ID: "n3", Addr: "127.0.0.1:3"}}}}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := s.clusterLimits()
	if l.IdleCache != cfg.IdleKeyCache {
		t.Fatalf("the replicated table's idle cache is %d keys, want Config.IdleKeyCache = %d", l.IdleCache, cfg.IdleKeyCache)
	}
	if s.limits.IdleCache != cfg.IdleKeyCache/cfg.Shards {
		t.Fatalf("a shard's idle cache is %d, want %d (unchanged)", s.limits.IdleCache, cfg.IdleKeyCache/cfg.Shards)
	}
}
