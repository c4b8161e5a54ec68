package cluster

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

type recorder []locktable.Effect

func (r *recorder) Deliver(e locktable.Effect) { *r = append(*r, e) }

// applier returns a function applying one batch of cmds to f as the next
// raft log entry (1 ms after the previous one), and the index of the last.
func applier(t *testing.T, f *FSM) (apply func(cmds ...Command), last func() uint64) {
	idx := uint64(0)
	now := time.Now().UnixNano()
	apply = func(cmds ...Command) {
		t.Helper()
		idx++
		now += int64(time.Millisecond)
		b := Batch{Time: now, Cmds: cmds}
		if err := f.Apply(&raft.Log{Type: raft.LogCommand, Index: idx, Data: AppendBatch(nil, &b)}); err != nil {
			t.Fatal(err)
		}
	}
	return apply, func() uint64 { return idx }
}

// TestLeaderStartDropsOwnStaleWaiters: a node that stopped serving answered
// its waiters U or M ("not executed"); when it becomes leader again without
// another leader's LeaderStart in between, its own LeaderStart must drop
// them too, or a later handoff would grant the lock to an acquire that was
// answered M.
func TestLeaderStartDropsOwnStaleWaiters(t *testing.T) {
	var out recorder
	f := NewFSM(locktable.Limits{MaxKeys: 100, MaxWaiters: 100, MaxWaitersPerKey: 100}, &out)
	apply, _ := applier(t, f)
	const inc = 7
	start := func() {
		meta, _ := json.Marshal(LeaderMeta{ID: "n1", ClientAddr: "127.0.0.1:1", Incarnation: inc})
		apply(Command{Op: OpLeaderStart, Key: meta, Arg: inc})
	}
	holder, waiter := ConnID(inc, 1), ConnID(inc, 2)
	start()
	apply(Command{Op: OpAcquire, Conn: holder, ReqID: 1, Key: []byte("k"), Arg: 60000 << 32})
	if len(out) != 1 || out[0].Status != wire.StatusGranted {
		t.Fatalf("first acquire: %+v", out)
	}
	tok := out[0].Token
	apply(Command{Op: OpAcquire, Conn: waiter, ReqID: 1, Key: []byte("k"), Arg: 60000<<32 | 60000})
	// Leadership lost (the waiter was answered U or M), then regained.
	start()
	out = out[:0]
	apply(Command{Op: OpRelease, Conn: holder, ReqID: 2, Key: []byte("k"), Arg: tok})
	for _, e := range out {
		if e.Owner.Conn == waiter && e.Status == wire.StatusGranted {
			t.Fatalf("a waiter from the earlier term was granted after the new LeaderStart: %+v", e)
		}
	}
	st, _ := f.StateDigest()
	if len(st.Keys) != 0 {
		t.Fatalf("table after the release: %+v, want empty", st.Keys)
	}
}
