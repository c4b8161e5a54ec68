package cluster

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// nopFSM applies nothing: what raft itself costs.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnap{}, nil }
func (nopFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnap struct{}

func (nopSnap) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnap) Release()                          {}

// BenchmarkRaftFloor is hashicorp/raft's own floor, the cluster's ceiling:
// three raft nodes in one process (in-memory transport and stores), a
// no-op state machine, this package's raft settings, entries of cmds
// commands of 39 bytes each (an acquire of a 16-byte key, AppendBatch's
// size), maxInflight entries in flight like the proposer. One op is one
// command: compare its cmds/s with BenchmarkClusterPipelined's ops/s at the
// same commands per entry (docs/benchmarks.md "Cluster throughput and
// memory").
//
//	go test ./server/cluster -run '^$' -bench RaftFloor -benchtime 2000000x
func BenchmarkRaftFloor(b *testing.B) {
	for _, cmds := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("cmds=%d", cmds), func(b *testing.B) { benchRaftFloor(b, cmds) })
	}
}

func benchRaftFloor(b *testing.B, cmds int) {
	const n = 3
	var (
		rafts  []*raft.Raft
		trans  []*raft.InmemTransport
		config raft.Configuration
	)
	for i := range n {
		addr, t := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("n%d", i)))
		trans = append(trans, t)
		config.Servers = append(config.Servers, raft.Server{ID: raft.ServerID(addr), Address: addr, Suffrage: raft.Voter})
	}
	for i := range n {
		for j := range n {
			if i != j {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
	for i := range n {
		// 1 s timings: starved heartbeats on a loaded machine would
		// otherwise change the leader mid-run.
		node := &Node{cfg: Config{NodeID: string(config.Servers[i].ID), Settings: Settings{
			HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLeaseTimeout: time.Second}}}
		node.cfg.setDefaults()
		node.log = node.cfg.Logger
		rc := node.raftConfig()
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(rc, nopFSM{}, store, store, raft.NewInmemSnapshotStore(), trans[i])
		if err != nil {
			b.Fatal(err)
		}
		defer r.Shutdown()
		if i == 0 {
			if err := r.BootstrapCluster(config).Error(); err != nil {
				b.Fatal(err)
			}
		}
		rafts = append(rafts, r)
	}
	var leader *raft.Raft
	for deadline := time.Now().Add(10 * time.Second); leader == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, r := range rafts {
			if r.State() == raft.Leader {
				leader = r
			}
		}
	}
	if leader == nil {
		b.Fatal("no leader")
	}
	data := make([]byte, 13+39*cmds)
	entries := max(b.N/cmds, 1)
	inflight := make(chan raft.ApplyFuture, maxInflight)
	errc := make(chan error, 1)
	go func() {
		var first error
		for f := range inflight {
			if err := f.Error(); err != nil && first == nil {
				first = err
			}
		}
		errc <- first
	}()
	b.ResetTimer()
	start := time.Now()
	for range entries {
		inflight <- leader.Apply(data, 5*time.Second)
	}
	close(inflight)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(entries*cmds)/time.Since(start).Seconds(), "cmds/s")
}
