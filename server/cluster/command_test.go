package cluster

import (
	"bytes"
	"testing"
)

// An entry is allocated at its exact size (raft keeps it in its log, spare
// capacity included), and decoding into a slice with room reuses it.
func TestBatchCodecExactSizeAndReuse(t *testing.T) {
	b := Batch{Time: 42, Cmds: []Command{
		{Op: OpAcquire, Conn: ConnID(1, 2), ReqID: 3, Key: []byte("bench/c00/k00001"), Arg: 30000 << 32},
		{Op: OpRelease, Conn: ConnID(1, 2), ReqID: 4, Key: []byte("k"), Arg: 99},
		{Op: OpDropConn, Conn: ConnID(1, 5)},
	}}
	data := AppendBatch(nil, &b)
	if cap(data) != len(data) {
		t.Fatalf("entry of %d bytes has capacity %d", len(data), cap(data))
	}
	scratch := make([]Command, 0, 8)
	got, err := decodeBatchInto(scratch, data)
	if err != nil {
		t.Fatal(err)
	}
	if &got.Cmds[0] != &scratch[:1][0] {
		t.Fatal("decodeBatchInto did not reuse the slice it was given")
	}
	if got.Time != b.Time || len(got.Cmds) != len(b.Cmds) {
		t.Fatalf("decoded %+v", got)
	}
	for i, c := range got.Cmds {
		w := b.Cmds[i]
		if c.Op != w.Op || c.Conn != w.Conn || c.ReqID != w.ReqID || c.Arg != w.Arg || !bytes.Equal(c.Key, w.Key) {
			t.Errorf("command %d: %+v, want %+v", i, c, w)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = decodeBatchInto(scratch, data) }); n != 0 {
		t.Errorf("decodeBatchInto with room: %v allocs, want 0", n)
	}
}
