package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/server/locktable"
)

// A snapshot is the state at the moment raft asked for it: commands applied
// after Snapshot (while Persist encodes, concurrently in raft) are not in
// it, and a fresh FSM restored from it holds the same table, token counter
// and metadata; the log-size accounting restarts at the capture.
func TestSnapshotCapturesThenPersists(t *testing.T) {
	limits := locktable.Limits{MaxKeys: 1000, MaxWaiters: 1000, MaxWaitersPerKey: 100}
	var out recorder
	f := NewFSM(limits, &out)
	apply, last := applier(t, f)
	const inc = 3
	meta, _ := json.Marshal(LeaderMeta{ID: "n1", ClientAddr: "127.0.0.1:1", Incarnation: inc})
	apply(Command{Op: OpLeaderStart, Key: meta, Arg: inc})
	for i := range 50 { // 50 held keys (in no order), 10 of them with a waiter
		k := []byte(fmt.Sprintf("k%02d", (i*37)%50))
		apply(Command{Op: OpAcquire, Conn: ConnID(inc, uint64(i+1)), ReqID: 1, Key: k, Arg: 60000 << 32})
		if i < 10 {
			apply(Command{Op: OpAcquire, Conn: ConnID(inc, uint64(100+i)), ReqID: 1, Key: k, Arg: 60000<<32 | 30000})
		}
	}
	if since, _ := f.LogBytes(); since == 0 {
		t.Fatal("no log bytes counted")
	}
	want, wantTok := f.StateDigest()

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if since, _ := f.LogBytes(); since != 0 {
		t.Errorf("%d log bytes since the snapshot at its capture, want 0", since)
	}
	// Applied after the capture, before Persist: not in the snapshot.
	apply(Command{Op: OpAcquire, Conn: ConnID(inc, 999), ReqID: 1, Key: []byte("later"), Arg: 60000 << 32})
	apply(Command{Op: OpCancel, Conn: ConnID(inc, 100), ReqID: 2, Arg: 1 << 32})
	if live, _ := f.StateDigest(); len(live.Keys) != 51 {
		t.Fatalf("the commands after the capture did not change the live table (%d keys)", len(live.Keys))
	}

	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(raft.SnapshotVersionMax, last(), 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	metas, _ := store.List()
	_, rc, err := store.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, size := f.LogBytes(); size != metas[0].Size || size == 0 {
		t.Errorf("snapshot size recorded %d, sink holds %d bytes", size, metas[0].Size)
	}
	g := NewFSM(limits, &recorder{})
	if err := g.Restore(io.NopCloser(rc)); err != nil {
		t.Fatal(err)
	}
	got, gotTok := g.StateDigest()
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if string(wj) != string(gj) || gotTok != wantTok {
		t.Fatalf("restored state differs from the captured one:\n got %s (token %d)\nwant %s (token %d)", gj, gotTok, wj, wantTok)
	}
	if len(got.Keys) != 50 || g.Leader().Incarnation != inc {
		t.Fatalf("restored %d keys, leader %+v", len(got.Keys), g.Leader())
	}
}
