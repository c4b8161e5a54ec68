package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/ticketing/ticketing/server/locktable"
)

func sampleState() fsmState {
	st := fsmState{
		LastToken: 1 << 41,
		Leader:    LeaderMeta{ID: "n2", ClientAddr: "127.0.0.1:7472", Incarnation: 7, Start: 1.7e18},
		Nodes:     map[string]NodeMeta{"n2": {ID: "n2", PeerAddr: "127.0.0.1:7473", Incarnation: 7}},
		Time:      1.7e18 + 5,
	}
	for i, key := range []string{"a", "bench/c00/k00001", string(make([]byte, 255))} {
		grant := int64(1.7e18) + int64(i)*1e6
		ks := locktable.KeyState{Key: key, Token: 1<<41 - uint64(i), Holder: ConnID(7, uint64(i+1)), Grant: grant, Deadline: grant + 30e9}
		for j := range i {
			ks.Waiters = append(ks.Waiters, locktable.WaiterState{
				Owner: locktable.Owner{Conn: ConnID(7, uint64(100+j)), ReqID: 1<<32 - 1}, LeaseMS: 60000,
				Enqueued: grant + int64(j)*1e3, Deadline: grant + int64(j)*1e3 + 5e9})
		}
		st.Table.Keys = append(st.Table.Keys, ks)
	}
	st.Table.Keys = append(st.Table.Keys, locktable.KeyState{Key: "past", Token: 3, Holder: 1, Grant: 5, Deadline: 1}) // deadline before grant: signed deltas
	// key sets (protocol 1.1): a held set, a waiting set
	set := []string{"s1", "s2"}
	for _, k := range set {
		st.Table.Keys = append(st.Table.Keys, locktable.KeyState{Key: k, Token: 9, Holder: 2, Grant: 5, Deadline: 50, Set: set,
			Waiters: []locktable.WaiterState{{Owner: locktable.Owner{Conn: 4, ReqID: 1}, LeaseMS: 10, Enqueued: 6, Deadline: 60, Set: []string{"s2", "s1"}}}})
	}
	return st
}

// A snapshot decodes to the state it encoded (every field of every key and
// waiter, and the metadata), in far fewer bytes than the JSON of earlier
// versions, which Restore still reads.
func TestSnapshotCodecRoundTrip(t *testing.T) {
	st := sampleState()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := encodeSnapshot(w, &st); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	got, err := decodeSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, st)
	}
	js, _ := json.Marshal(&st)
	if buf.Len()*2 > len(js) {
		t.Errorf("binary snapshot %d bytes, JSON %d: want under half", buf.Len(), len(js))
	}
	legacy, err := decodeSnapshot(bytes.NewReader(js))
	if err != nil || !reflect.DeepEqual(legacy, st) {
		t.Fatalf("JSON snapshot of an earlier version: %v\n%+v", err, legacy)
	}
	// Every truncation and a trailing byte are errors, never a panic or a
	// silently shorter table.
	for n := range buf.Len() {
		if _, err := decodeSnapshot(bytes.NewReader(buf.Bytes()[:n])); err == nil {
			t.Fatalf("truncated to %d of %d bytes: no error", n, buf.Len())
		}
	}
	if _, err := decodeSnapshot(bytes.NewReader(append(buf.Bytes(), 0))); !errors.Is(err, errBadSnapshot) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// The codec writes the fields of locktable.KeyState, WaiterState and Owner
// one by one: a field added there must be added to snapcodec.go (and this
// count), or snapshots would silently drop it.
func TestSnapshotCodecCoversEveryField(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want int
	}{
		{locktable.KeyState{}, 7},
		{locktable.WaiterState{}, 5},
		{locktable.Owner{}, 2},
		{locktable.State{}, 1},
	} {
		if n := reflect.TypeOf(tc.v).NumField(); n != tc.want {
			t.Errorf("%T has %d fields, the snapshot codec knows %d: update snapcodec.go", tc.v, n, tc.want)
		}
	}
}
