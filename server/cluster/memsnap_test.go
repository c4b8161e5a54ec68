package cluster

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// The chunked in-memory snapshot store reads back what was written (across
// chunk boundaries), lists only the latest closed snapshot, and keeps it
// when a later one is cancelled.
func TestMemSnapshotStore(t *testing.T) {
	m := newMemSnapshotStore()
	if l, _ := m.List(); len(l) != 0 {
		t.Fatalf("empty store lists %d", len(l))
	}
	data := make([]byte, 2*snapChunk+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	write := func(index uint64, data []byte) raft.SnapshotSink {
		s, err := m.Create(raft.SnapshotVersionMax, index, 2, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		for p := data; len(p) > 0; {
			k := min(len(p), 100_000)
			if n, err := s.Write(p[:k]); n != k || err != nil {
				t.Fatalf("write: %d %v", n, err)
			}
			p = p[k:]
		}
		return s
	}
	s := write(10, data)
	if l, _ := m.List(); len(l) != 0 {
		t.Fatal("a snapshot is listed before its sink closed")
	}
	s.Close()
	c := write(20, []byte("partial"))
	c.Cancel()
	l, _ := m.List()
	if len(l) != 1 || l[0].Index != 10 || l[0].Size != int64(len(data)) {
		t.Fatalf("list %+v, want the closed snapshot at index 10 of %d bytes", l, len(data))
	}
	meta, rc, err := m.Open(l[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	if meta.Index != 10 || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (index %d), want %d", len(got), meta.Index, len(data))
	}
	if _, _, err := m.Open("2-20"); err == nil {
		t.Fatal("the cancelled snapshot opens")
	}
}
