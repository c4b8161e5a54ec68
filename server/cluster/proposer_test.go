package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

type effects []locktable.Effect

func (e *effects) Deliver(x locktable.Effect) { *e = append(*e, x) }

// A lock command whose raft apply failed is answered M only when raft says
// it was never appended (not the leader: definitely not executed); any other
// failure — leadership lost after appending, an enqueue timeout, shutdown —
// may have committed it, and is answered U (protocol.md §3, §7). Commands of
// another incarnation's connections and non-lock commands get no answer.
func TestProposerFailureAnswers(t *testing.T) {
	const inc = 77
	ours := ConnID(inc, 5)
	theirs := ConnID(inc+1, 5)
	cmds := []Command{
		{Op: OpAcquire, Conn: ours, ReqID: 1, Key: []byte("k")},
		{Op: OpRelease, Conn: ours, ReqID: 2, Key: []byte("k")},
		{Op: OpCancel, Conn: ours, ReqID: 3, Key: []byte("k")},
		{Op: OpAcquire, Conn: theirs, ReqID: 4, Key: []byte("k")},
		{Op: OpExpire, Key: []byte("k"), Arg: 9},
		{Op: OpWaitTimeout, Conn: ours, ReqID: 6},
	}
	for _, tc := range []struct {
		err  error
		want wire.Status
	}{
		{raft.ErrNotLeader, wire.StatusMoved},
		{fmt.Errorf("apply: %w", raft.ErrNotLeader), wire.StatusMoved},
		{raft.ErrLeadershipLost, wire.StatusUnknown},
		{raft.ErrEnqueueTimeout, wire.StatusUnknown},
		{raft.ErrRaftShutdown, wire.StatusUnknown},
		{raft.ErrAbortedByRestore, wire.StatusUnknown},
		{errors.New("disk on fire"), wire.StatusUnknown},
	} {
		var got effects
		p := &proposer{n: &Node{incarnation: inc, out: &got}}
		p.fail(cmds, tc.err)
		if len(got) != 3 {
			t.Fatalf("%v: %d answers %+v, want 3 (our A, R, C only)", tc.err, len(got), got)
		}
		for i, e := range got {
			if e.Owner.Conn != ours || e.Owner.ReqID != uint32(i+1) {
				t.Errorf("%v: answer %d to %+v", tc.err, i, e.Owner)
			}
			if e.Status != tc.want {
				t.Errorf("%v: req %d answered %q, want %q", tc.err, e.Owner.ReqID, rune(e.Status), rune(tc.want))
			}
		}
	}
}

// Never-proposed commands (the node stopped leading before proposing them)
// are answered M: definitely not executed.
func TestProposerDropPendingAnswersMoved(t *testing.T) {
	var got effects
	p := &proposer{n: &Node{incarnation: 3, out: &got}}
	p.pending = []Command{{Op: OpAcquire, Conn: ConnID(3, 1), ReqID: 8, Key: []byte("k")}}
	p.dropPending()
	if len(got) != 1 || got[0].Status != wire.StatusMoved {
		t.Fatalf("answers %+v, want one M", got)
	}
	if len(p.pending) != 0 {
		t.Fatalf("pending not cleared")
	}
}
