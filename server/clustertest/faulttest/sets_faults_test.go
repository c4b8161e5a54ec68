package faulttest

import "testing"

// TestFaultsWithSets (issue 30, protocol.md §12.2) runs the faults that
// change the leader on 3 node processes under a workload in which 40 % of
// the acquires take key sets of 2 of the same 3 keys that single-key
// acquires take, and checks the history as TestFaults does: the porcupine
// model takes a set as one atomic operation on its keys (the partition is
// the keys that sets link), plus token order, disjoint holders per key and
// the fenced resource on every key of a set.
func TestFaultsWithSets(t *testing.T) {
	needBinary(t)
	for _, f := range faults {
		switch f.name {
		case "kill-leader", "pause-leader", "partition-leader":
			t.Run(f.name+"/n3", func(t *testing.T) { faultRunSets(t, 3, f, 0.4) })
		}
	}
}
