package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// labelOf reads f's replicated label of conn.
func labelOf(f *FSM, conn uint64) (label, addr string, ok bool) {
	f.With(func(*locktable.Table) { label, addr, ok = f.LabelLocked(conn) })
	return
}

// snapRestore persists f's snapshot and restores it into a fresh FSM.
func snapRestore(t *testing.T, f *FSM, limits locktable.Limits, idx uint64) (*FSM, []byte) {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	store := raft.NewInmemSnapshotStore()
	sink, _ := store.Create(raft.SnapshotVersionMax, idx, 1, raft.Configuration{}, 1, nil)
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	metas, _ := store.List()
	_, rc, _ := store.Open(metas[0].ID)
	data, _ := io.ReadAll(rc)
	g := NewFSM(limits, &recorder{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	return g, data
}

// TestFSMLabels: an OpLabel gives a connection its label on every node
// (protocol.md §12.3); connections with the same label share one string
// (refcounted); a held lock keeps its holder's label through a
// LeaderStart (a leader change) while the entries of connections holding
// nothing go; a dropped connection's label goes once its last lock is
// released; the table (orphans included) survives snapshot and restore.
func TestFSMLabels(t *testing.T) {
	limits := locktable.Limits{MaxKeys: 100, MaxWaiters: 100, MaxWaitersPerKey: 100}
	var out recorder
	f := NewFSM(limits, &out)
	apply, last := applier(t, f)
	start := func(inc uint32) {
		meta, _ := json.Marshal(LeaderMeta{ID: "n", ClientAddr: "127.0.0.1:1", Incarnation: inc})
		apply(Command{Op: OpLeaderStart, Key: meta, Arg: uint64(inc)})
	}
	start(1)
	a, b, c, d := ConnID(1, 1), ConnID(1, 2), ConnID(1, 3), ConnID(1, 4)
	acq := func(conn uint64, key string) Command {
		return Command{Op: OpAcquire, Conn: conn, ReqID: 1, Key: []byte(key), Arg: wire.AcquireArg(60000, 0)}
	}
	apply(Command{Op: OpLabel, Conn: a, Key: EncodeLabel("web-1/42 go/1.1.0", "10.0.0.1:5000")}, acq(a, "k1"),
		Command{Op: OpLabel, Conn: b, Key: EncodeLabel("batch", "10.0.0.2:5000")},
		Command{Op: OpAcquireSet, Conn: b, ReqID: 1, Key: setKey("s1", "s2"), Arg: wire.AcquireArg(60000, 0)},
		Command{Op: OpLabel, Conn: c, Key: EncodeLabel("batch", "10.0.0.3:5000")}, acq(c, "k3"),
		Command{Op: OpLabel, Conn: d, Key: EncodeLabel("idle", "10.0.0.4:5000")})
	if len(out) != 3 {
		t.Fatalf("grants: %+v", out)
	}
	tokC := out[2].Token
	if l, addr, ok := labelOf(f, a); !ok || l != "web-1/42 go/1.1.0" || addr != "10.0.0.1:5000" {
		t.Fatalf("a: %q %q %v", l, addr, ok)
	}
	if f.labels.conns[b].l != f.labels.conns[c].l || len(f.labels.byStr) != 3 || f.labels.byStr["batch"].refs != 2 {
		t.Fatalf("labels not interned: %d strings, batch refs %d", len(f.labels.byStr), f.labels.byStr["batch"].refs)
	}

	// c closes holding k3: its label stays while it holds k3
	apply(Command{Op: OpDropConn, Conn: c})
	if l, _, ok := labelOf(f, c); !ok || l != "batch" {
		t.Fatalf("a closed connection holding a lock lost its label: %q %v", l, ok)
	}

	// a leader change: d holds nothing, its entry goes; a, b, c keep theirs
	start(2)
	if _, _, ok := labelOf(f, d); ok {
		t.Fatal("the label of a connection holding nothing survived the LeaderStart")
	}
	for conn, want := range map[uint64]string{a: "web-1/42 go/1.1.0", b: "batch", c: "batch"} {
		if l, _, ok := labelOf(f, conn); !ok || l != want {
			t.Fatalf("conn %x after the leader change: %q %v, want %q", conn, l, ok, want)
		}
	}
	if _, ok := f.labels.byStr["idle"]; ok {
		t.Fatal("an unreferenced label string was kept")
	}

	// snapshot and restore: the same entries, orphans included
	g, data := snapRestore(t, f, limits, last())
	if data[4] != snapVersion {
		t.Fatalf("snapshot version %d, want %d", data[4], snapVersion)
	}
	if w, gl := f.labels.entries(), g.labels.entries(); !reflect.DeepEqual(w, gl) || len(w) != 3 || g.labels.orphans != 3 {
		t.Fatalf("restored labels %+v (orphans %d), want %+v", gl, g.labels.orphans, w)
	}
	if g.labels.conns[b].l != g.labels.conns[c].l {
		t.Fatal("the restored labels are not interned")
	}

	// releasing c's k3 and then enough lock commands: c's entry goes
	// (amortized sweep), on both FSMs alike
	applyG, _ := applier(t, g)
	rel := Command{Op: OpRelease, Conn: ConnID(2, 9), ReqID: 1, Key: []byte("k3"), Arg: tokC}
	apply(rel)
	applyG(rel)
	for range sweepOps {
		p := Command{Op: OpRelease, Conn: ConnID(2, 9), ReqID: 2, Key: []byte("nothing"), Arg: 1}
		apply(p)
		applyG(p)
	}
	for _, h := range []*FSM{f, g} {
		if _, _, ok := labelOf(h, c); ok {
			t.Fatal("the label of a closed connection outlived its last lock")
		}
		if l, _, ok := labelOf(h, a); !ok || l != "web-1/42 go/1.1.0" {
			t.Fatal("a holder's label went in the sweep")
		}
		if h.labels.byStr["batch"].refs != 1 {
			t.Fatalf("batch refs %d, want 1", h.labels.byStr["batch"].refs)
		}
	}
	if !reflect.DeepEqual(f.labels.entries(), g.labels.entries()) {
		t.Fatal("the restored FSM's labels went apart from the original's")
	}

	// a new label replaces the old; "" removes it
	apply(Command{Op: OpLabel, Conn: a, Key: EncodeLabel("renamed", "10.0.0.1:5000")})
	if l, _, _ := labelOf(f, a); l != "renamed" {
		t.Fatalf("relabelled: %q", l)
	}
	apply(Command{Op: OpLabel, Conn: a, Key: EncodeLabel("", "10.0.0.1:5000")})
	if _, _, ok := labelOf(f, a); ok {
		t.Fatal("an empty label did not clear it")
	}
}

// TestSnapshotReadsVersion2: a snapshot of the previous version (no labels
// section) still restores.
func TestSnapshotReadsVersion2(t *testing.T) {
	limits := locktable.Limits{MaxKeys: 100, MaxWaiters: 100, MaxWaitersPerKey: 100}
	f := NewFSM(limits, &recorder{})
	apply, last := applier(t, f)
	meta, _ := json.Marshal(LeaderMeta{ID: "n", Incarnation: 1})
	apply(Command{Op: OpLeaderStart, Key: meta, Arg: 1},
		Command{Op: OpAcquire, Conn: ConnID(1, 1), ReqID: 1, Key: []byte("k"), Arg: wire.AcquireArg(60000, 0)})
	_, data := snapRestore(t, f, limits, last())
	// version 3 with no labels ends in two zero counts; version 2 is that without them
	if data[len(data)-2] != 0 || data[len(data)-1] != 0 {
		t.Fatalf("no empty labels section at the end: % x", data[len(data)-2:])
	}
	v2 := append([]byte(nil), data[:len(data)-2]...)
	v2[4] = 2
	g := NewFSM(limits, &recorder{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(v2))); err != nil {
		t.Fatal(err)
	}
	if w, _ := f.StateDigest(); !reflect.DeepEqual(w, func() locktable.State { s, _ := g.StateDigest(); return s }()) {
		t.Fatal("version 2 restore differs")
	}
}
