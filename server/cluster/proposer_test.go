package cluster

import (
	"bytes"
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
	p.add([]Command{{Op: OpAcquire, Conn: ConnID(3, 1), ReqID: 8, Key: []byte("k")}})
	p.dropPending()
	if len(got) != 1 || got[0].Status != wire.StatusMoved || got[0].Owner.ReqID != 8 {
		t.Fatalf("answers %+v, want one M", got)
	}
	if p.npend != 0 || len(p.pending) != 0 {
		t.Fatalf("pending not cleared")
	}
}

// The queue keeps commands encoded (issue 35: no copy of the key per
// command): add copies each key at once, so the caller may reuse it; the
// commands come back as they were queued, in order, with any key length;
// an entry of the first n of them ends exactly at a command boundary.
func TestProposerQueueEncodesAtOnce(t *testing.T) {
	p := &proposer{n: &Node{}}
	var want []Command
	key := make([]byte, 0, 300)
	for i := range 300 {
		key = append(key[:0], bytes.Repeat([]byte{byte('a' + i%26)}, i%251)...)
		c := Command{Op: Op(1 + i%int(opMax)), Conn: uint64(i) << 40, ReqID: uint32(i), Arg: uint64(i) * 7, Key: key}
		p.add([]Command{c})
		c.Key = bytes.Clone(key)
		want = append(want, c)
		clear(key) // the caller's buffer is reused: the queue kept its own copy
	}
	k := commandsPrefix(p.pending, 100)
	b, err := DecodeBatch(entryOf(p.pending[:k], 100, 42))
	if err != nil || b.Time != 42 || len(b.Cmds) != 100 || !commandsEqual(b.Cmds, want[:100]) {
		t.Fatalf("the first 100 commands: err %v, time %d, %d commands", err, b.Time, len(b.Cmds))
	}
	got := p.takeAll()
	if !commandsEqual(got, want) {
		t.Fatalf("takeAll returned %d commands, not the %d queued", len(got), len(want))
	}
	if p.npend != 0 || p.takeAll() != nil {
		t.Fatal("the queue is not empty after takeAll")
	}
}

func commandsEqual(a, b []Command) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Op != y.Op || x.Conn != y.Conn || x.ReqID != y.ReqID || x.Arg != y.Arg || !bytes.Equal(x.Key, y.Key) {
			return false
		}
	}
	return true
}

// Queueing a command allocates nothing once the queue's buffer has grown
// (the request path does not allocate; the key used to be copied).
func TestProposerAddZeroAllocs(t *testing.T) {
	p := &proposer{n: &Node{}, kick: make(chan struct{}, 1)}
	cmd := []Command{{Op: OpAcquire, Conn: 1, ReqID: 2, Key: []byte("some-key-0001"), Arg: 3}}
	for range 64 {
		p.add(cmd)
	}
	p.mu.Lock()
	p.pending, p.npend = p.pending[:0], 0
	p.mu.Unlock()
	if n := testing.AllocsPerRun(32, func() { p.add(cmd) }); n != 0 {
		t.Fatalf("add allocates %.1f times per command, want 0", n)
	}
}
