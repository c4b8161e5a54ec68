package cluster

import (
	"encoding/json"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// setKey is the Key of an OpAcquireSet / OpReleaseSet: count ‖ the S/X body.
func setKey(keys ...string) []byte {
	frame := wire.AppendAcquireSet(nil, 0, keys, 1, 0)
	return append([]byte{byte(len(keys))}, frame[wire.HeaderLen:]...)
}

// A key set is one replicated command, applied atomically (protocol.md
// §12.2): granted whole or queued on every key; X frees every key at once
// and hands each to its next head; a snapshot carries held and waiting sets.
func TestFSMKeySets(t *testing.T) {
	limits := locktable.Limits{MaxKeys: 100, MaxWaiters: 100, MaxWaitersPerKey: 100}
	var out recorder
	f := NewFSM(limits, &out)
	apply, last := applier(t, f)
	const inc = 4
	meta, _ := json.Marshal(LeaderMeta{ID: "n1", ClientAddr: "127.0.0.1:1", Incarnation: inc})
	apply(Command{Op: OpLeaderStart, Key: meta, Arg: inc})
	a, b, c := ConnID(inc, 1), ConnID(inc, 2), ConnID(inc, 3)
	apply(Command{Op: OpAcquireSet, Conn: a, ReqID: 1, Key: setKey("x", "y"), Arg: wire.AcquireArg(60000, 0)})
	if len(out) != 1 || out[0].Status != wire.StatusGranted {
		t.Fatalf("set acquire: %+v", out)
	}
	tok := out[0].Token
	out = out[:0]
	apply(Command{Op: OpAcquireSet, Conn: b, ReqID: 1, Key: setKey("y", "z"), Arg: wire.AcquireArg(60000, 30000)},
		Command{Op: OpAcquire, Conn: c, ReqID: 1, Key: []byte("z"), Arg: wire.AcquireArg(60000, 30000)},
		Command{Op: OpRelease, Conn: c, ReqID: 2, Key: []byte("x"), Arg: tok})
	if len(out) != 1 || out[0].Status != wire.StatusNotHolder {
		t.Fatalf("R on a set key: %+v, want N only (the others queue)", out)
	}
	out = out[:0]

	// a snapshot now holds a held set, a waiting set and a blocked key
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	store := raft.NewInmemSnapshotStore()
	sink, _ := store.Create(raft.SnapshotVersionMax, last(), 1, raft.Configuration{}, 1, nil)
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	metas, _ := store.List()
	_, rc, _ := store.Open(metas[0].ID)
	var out2 recorder
	g := NewFSM(limits, &out2)
	if err := g.Restore(io.NopCloser(rc)); err != nil {
		t.Fatal(err)
	}
	if w, _ := f.StateDigest(); !reflect.DeepEqual(w, func() locktable.State { s, _ := g.StateDigest(); return s }()) {
		t.Fatal("restored key sets differ")
	}

	// X on both: b's set gets y and z, then c waits behind it on z
	rel := Command{Op: OpReleaseSet, Conn: a, ReqID: 3, Key: setKey("y", "x"), Arg: tok}
	apply(rel)
	applyG, _ := applier(t, g)
	applyG(rel)
	for _, o := range []recorder{out, out2} {
		// the handoff is delivered while X applies, X's own O after it
		if len(o) != 2 || o[1].Status != wire.StatusReleased || o[0].Status != wire.StatusGranted || o[0].Owner.Conn != b || o[0].Token <= tok {
			t.Fatalf("after X: %+v", o)
		}
	}
}
