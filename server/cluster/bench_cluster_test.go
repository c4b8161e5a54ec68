package cluster_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	"github.com/ticketing/ticketing/server/clustertest"
)

// BenchmarkClusterPipelined drives the leader of an in-process 3-node
// cluster (real servers, raft over loopback) like `ticketing bench --conns 8
// --pipeline 64`: every connection keeps 64 requests in flight, each slot
// repeating acquire → release on a key of its own. One op is one acquire
// or one release. It reports ops/s, the whole process's CPU per op (three
// nodes and the client: steadier than ops/s on a loaded machine) and how
// many commands went into one raft log entry (group commit).
//
//	go test ./server/cluster -run '^$' -bench ClusterPipelined -benchtime 2000000x
func BenchmarkClusterPipelined(b *testing.B) {
	// Raft timings of 1 s: on a loaded shared machine the 200 ms defaults
	// let starved heartbeats change the leader mid-run.
	c := clustertest.Start(b, 3, clustertest.Options{Mutate: func(_ int, cfg *server.Config) {
		cfg.Cluster.HeartbeatTimeout = time.Second
		cfg.Cluster.ElectionTimeout = time.Second
		cfg.Cluster.LeaderLeaseTimeout = time.Second
	}})
	l := c.WaitClockHealthy(10 * time.Second)
	const conns, depth = 8, 64
	ncs := make([]net.Conn, conns)
	for i := range ncs {
		nc, err := net.Dial("tcp", l.Client)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := wire.ClientHandshake(nc, wire.RoleClient, nil); err != nil {
			b.Fatal(err)
		}
		ncs[i] = nc
		defer nc.Close()
	}
	fsm := l.Srv.ClusterNode().FSM()
	perConn := max(b.N/conns, 2*depth)
	i0 := fsm.Applied()
	cpu0 := cpuTime()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for ci, nc := range ncs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := slidingWindow(nc, ci, depth, perConn); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	ops := float64(perConn * conns)
	entries := fsm.Applied() - i0
	b.ReportMetric(ops/el.Seconds(), "ops/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/ops, "cpu-ns/op")
	b.ReportMetric(ops/float64(max(entries, 1)), "cmds/entry")
}

// slidingWindow keeps depth requests in flight on nc until ops answers
// arrived: slot i acquires key ci/i (lease 30 s), releases it with the
// granted token, and again.
func slidingWindow(nc net.Conn, ci, depth, ops int) error {
	key := func(i int) []byte { return fmt.Appendf(nil, "bench/c%02d/k%05d", ci, i) }
	keys := make([][]byte, depth)
	for i := range keys {
		keys[i] = key(i)
	}
	tokens := make([]uint64, depth)
	var wbuf []byte
	for i := range depth {
		wbuf = wire.AppendRequestHeader(wbuf, wire.OpAcquire, 16, 0, uint32(i), 30000<<32)
		wbuf = append(wbuf, keys[i]...)
	}
	if _, err := nc.Write(wbuf); err != nil {
		return err
	}
	rbuf := make([]byte, 64<<10)
	have, done, sent := 0, 0, depth
	for done < ops {
		n, err := nc.Read(rbuf[have:])
		if err != nil {
			return err
		}
		have += n
		wbuf = wbuf[:0]
		p := 0
		for ; have-p >= 16; p += 16 {
			h := rbuf[p : p+16]
			slot := binary.BigEndian.Uint32(h[4:8])
			done++
			switch h[0] {
			case byte(wire.StatusGranted):
				tokens[slot] = binary.BigEndian.Uint64(h[8:16])
				if sent < ops {
					wbuf = wire.AppendRequestHeader(wbuf, wire.OpRelease, 16, 0, slot, tokens[slot])
					wbuf = append(wbuf, keys[slot]...)
					sent++
				}
			case byte(wire.StatusReleased):
				if sent < ops {
					wbuf = wire.AppendRequestHeader(wbuf, wire.OpAcquire, 16, 0, slot, 30000<<32)
					wbuf = append(wbuf, keys[slot]...)
					sent++
				}
			default:
				return fmt.Errorf("answer %q (code %d)", h[0], h[1])
			}
		}
		have = copy(rbuf, rbuf[p:have])
		if len(wbuf) > 0 {
			if _, err := nc.Write(wbuf); err != nil {
				return err
			}
		}
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
