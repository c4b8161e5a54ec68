package cluster

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// simNode is one node's state machine on a simulated timeline: real is the
// true time (ns); the node's monotonic clock is real + an arbitrary origin,
// its wall clock real + skew.
type simNode struct {
	f    *FSM
	skew int64
	idx  uint64
	real *int64
}

func newSimNode(real *int64, skew, origin int64) *simNode {
	var out recorder
	f := NewFSM(locktable.Limits{MaxKeys: 100, MaxWaiters: 100, MaxWaitersPerKey: 100}, &out)
	f.mono = func() int64 { return *real + origin }
	return &simNode{f: f, skew: skew, real: real}
}

func (s *simNode) wall() int64 { return *s.real + s.skew }

// applyAt applies one batch stamped with the leader's time at, delay ns after
// the leader formed it (the real clock is moved there and back).
func (s *simNode) applyAt(at, delay int64, cmds ...Command) {
	r := *s.real
	*s.real = r + delay
	s.idx++
	b := Batch{Time: at, Cmds: cmds}
	s.f.Apply(&raft.Log{Type: raft.LogCommand, Index: s.idx, Data: AppendBatch(nil, &b)})
	*s.real = r
}

func leaderStart(id string, inc uint32, shift int64) Command {
	meta, _ := json.Marshal(LeaderMeta{ID: id, ClientAddr: "127.0.0.1:1", Incarnation: inc, Shift: shift})
	return Command{Op: OpLeaderStart, Key: meta, Arg: uint64(inc)}
}

func deadlineOf(t *testing.T, f *FSM, key string) int64 {
	t.Helper()
	var at int64
	var ok bool
	f.With(func(tb *locktable.Table) { _, at, ok = tb.HolderTimes(key) })
	if !ok {
		t.Fatalf("%s not held", key)
	}
	return at
}

// The inherited-lease rule (docs/architecture.md "Leases across leader
// changes", issue #13 items 1 and 9): a new leader moves every held lease
// into its own clock by the offset it measured with its monotonic clock
// against the previous leader's batches, so whatever its wall clock says
// (verified or not, 30 s behind or ahead), the lease ends — in real time —
// no earlier than the holder's client-side deadline (send + lease) and no
// later than grant + lease + max_clock_skew. Every node applying the
// LeaderStart holds the same deadlines.
func TestInheritedLeaseFollowsTheGrantingClock(t *testing.T) {
	const (
		ms    = int64(time.Millisecond)
		s     = int64(time.Second)
		lease = 20 * s
		skew  = 500 * ms // max_clock_skew
	)
	for _, tc := range []struct {
		name       string
		oldSkew    int64 // the granting leader's wall clock − real
		newSkew    int64 // the new leader's
		fastDelay  int64 // the quickest apply of the old leader's batches on the new leader
		takeoverAt int64 // real time of the take-over after the grant
	}{
		{"same clocks", 0, 0, 2 * ms, 6 * s},
		{"new leader 30 s behind", 0, -30 * s, 2 * ms, 6 * s},
		{"new leader 30 s ahead", 0, 30 * s, 2 * ms, 6 * s},
		{"new leader 400 ms ahead (verified)", 0, 400 * ms, 2 * ms, 6 * s},
		{"new leader 400 ms behind (verified)", 0, -400 * ms, 2 * ms, 6 * s},
		{"old leader 30 s ahead, new one right", 30 * s, 0, 2 * ms, 6 * s},
		{"old leader 30 s behind, new one 30 s ahead", -30 * s, 30 * s, 2 * ms, 6 * s},
		{"take-over after the deadline", 0, -30 * s, 2 * ms, 25 * s},
		{"slow applies (300 ms)", 0, 30 * s, 300 * ms, 6 * s},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real := int64(1_000 * s)
			old := newSimNode(&real, tc.oldSkew, 7*s)
			nw := newSimNode(&real, tc.newSkew, 123*s)
			third := newSimNode(&real, 5*s, 99*s) // a follower: applies the same log
			nodes := []*simNode{old, nw, third}
			apply := func(leader *simNode, delay int64, cmds ...Command) {
				at := leader.wall()
				for _, n := range nodes {
					d := delay
					if n == leader {
						d = 0
					}
					n.applyAt(at, d, cmds...)
				}
			}
			apply(old, tc.fastDelay, leaderStart("old", 1, 0))
			real += s
			send := real - 5*ms // the client sent its acquire 5 ms before the leader batched it
			grant := real
			apply(old, tc.fastDelay, Command{Op: OpAcquire, Conn: ConnID(1, 1), ReqID: 1, Key: []byte("k"), Arg: wire.AcquireArg(uint32(lease/ms), 0)})
			real += 2 * s
			apply(old, 800*ms, Command{Op: OpAcquire, Conn: ConnID(1, 2), ReqID: 1, Key: []byte("other"), Arg: wire.AcquireArg(60_000, 0)}) // a slow apply changes nothing
			real = grant + tc.takeoverAt
			shift := nw.f.InheritShift(nw.wall())
			apply(nw, tc.fastDelay, leaderStart("new", 2, shift))

			at := deadlineOf(t, nw.f, "k")
			if moved := at - tc.newSkew; moved != grant+lease+tc.fastDelay {
				t.Errorf("deadline moved to grant + lease + %v (real time), want + %v (the quickest apply's delay)", time.Duration(moved-grant-lease), time.Duration(tc.fastDelay))
			}
			end := InheritedDeadline(at, skew) - tc.newSkew // real time the new leader expires it
			if end < send+lease {
				t.Errorf("ends %v before the holder's client-side deadline", time.Duration(send+lease-end))
			}
			if end > grant+lease+skew+tc.fastDelay {
				t.Errorf("ends %v after grant + lease + max_clock_skew", time.Duration(end-grant-lease-skew))
			}
			for _, n := range nodes {
				if got := deadlineOf(t, n.f, "k"); got != at {
					t.Errorf("a node holds deadline %d, the new leader %d", got, at)
				}
			}
		})
	}
}

// The same rule through a snapshot: a node that learned the leases from a
// snapshot (and later the new leader's batches) maps them no earlier than
// the granting clock says, late by at most the snapshot's age.
func TestInheritedLeaseThroughASnapshot(t *testing.T) {
	const (
		ms    = int64(time.Millisecond)
		s     = int64(time.Second)
		lease = 20 * s
	)
	for _, newSkew := range []int64{-30 * s, 0, 30 * s} {
		real := int64(1_000 * s)
		old := newSimNode(&real, 0, 7*s)
		old.applyAt(old.wall(), 0, leaderStart("old", 1, 0))
		real += s
		grant := real
		old.applyAt(old.wall(), 0, Command{Op: OpAcquire, Conn: ConnID(1, 1), ReqID: 1, Key: []byte("k"), Arg: wire.AcquireArg(uint32(lease/ms), 0)})
		real += s
		old.applyAt(old.wall(), 0, Command{Op: OpAcquire, Conn: ConnID(1, 2), ReqID: 1, Key: []byte("j"), Arg: wire.AcquireArg(uint32(lease/ms), 0)})
		snap, err := old.f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		store := raft.NewInmemSnapshotStore()
		sink, _ := store.Create(raft.SnapshotVersionMax, old.idx, 1, raft.Configuration{}, 1, nil)
		if err := snap.Persist(sink); err != nil {
			t.Fatal(err)
		}
		const age = 300 * ms
		real += age
		nw := newSimNode(&real, newSkew, 55*s)
		_, rc, err := store.Open(sink.ID())
		if err != nil {
			t.Fatal(err)
		}
		if err := nw.f.Restore(rc); err != nil {
			t.Fatal(err)
		}
		nw.idx = old.idx
		real += 2 * s
		nw.applyAt(nw.wall(), 0, leaderStart("new", 2, nw.f.InheritShift(nw.wall())))
		end := deadlineOf(t, nw.f, "k") - newSkew
		if end < grant+lease || end > grant+lease+age {
			t.Errorf("new leader %v off: lease ends at grant + lease + %v, want within [0, %v]", time.Duration(newSkew), time.Duration(end-grant-lease), time.Duration(age))
		}
	}
}

// However many leader changes happen during a lease, and whatever the
// leaders' clocks, the lease is moved (never extended) by each: the last
// leader ends it within grant + lease + max_clock_skew + the take-overs'
// measurement delays, and never before the holder's deadline.
func TestInheritedLeaseAcrossManyLeaderChanges(t *testing.T) {
	const (
		ms    = int64(time.Millisecond)
		s     = int64(time.Second)
		lease = 20 * s
		skew  = 500 * ms
		delay = 3 * ms
	)
	real := int64(1_000 * s)
	skews := []int64{0, -30 * s, 30 * s, 400 * ms, -400 * ms}
	var nodes []*simNode
	for i, sk := range skews {
		nodes = append(nodes, newSimNode(&real, sk, int64(i+1)*11*s))
	}
	apply := func(leader *simNode, cmds ...Command) {
		at := leader.wall()
		for _, n := range nodes {
			d := int64(delay)
			if n == leader {
				d = 0
			}
			n.applyAt(at, d, cmds...)
		}
	}
	apply(nodes[0], leaderStart("n0", 1, 0))
	real += s
	grant := real
	apply(nodes[0], Command{Op: OpAcquire, Conn: ConnID(1, 1), ReqID: 1, Key: []byte("k"), Arg: wire.AcquireArg(uint32(lease/ms), 0)})
	changes := 0
	var last *simNode
	for round := range 12 {
		real += 1500 * ms
		last = nodes[(round+1)%len(nodes)]
		apply(last, leaderStart("n", uint32(round+2), last.f.InheritShift(last.wall())))
		changes++
	}
	end := InheritedDeadline(deadlineOf(t, last.f, "k"), skew) - last.skew
	if end < grant+lease {
		t.Errorf("after %d leader changes the lease ends %v early", changes, time.Duration(grant+lease-end))
	}
	if limit := grant + lease + skew + int64(changes)*delay; end > limit {
		t.Errorf("after %d leader changes the lease ends %v past grant + lease + max_clock_skew + their delays", changes, time.Duration(end-limit))
	}
}

func TestInheritedDeadlineSaturates(t *testing.T) {
	if got := InheritedDeadline(math.MaxInt64-10, 500); got != math.MaxInt64 {
		t.Errorf("InheritedDeadline near the end of time = %d, want MaxInt64", got)
	}
	if got := InheritedDeadline(1000, 500); got != 1500 {
		t.Errorf("InheritedDeadline(1000, 500) = %d, want 1500", got)
	}
}
