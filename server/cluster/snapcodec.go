package cluster

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/ticketing/ticketing/server/locktable"
)

// The snapshot encoding. A held key costs about 45 bytes in it (a 16-byte
// key) where JSON took about 170, and every node keeps its latest snapshot
// in memory (the in-memory snapshot store) while the log between snapshots
// is sized by it (node.go snapshotLoop): docs/benchmarks.md "Cluster
// throughput and memory".
//
//	magic   "\x00TKS" then version 1
//	meta    uvarint length, JSON of the fsmState without its table's keys
//	        (leader, members, last token: small, and open to new fields)
//	count   uvarint number of held keys, then per key, keys sorted:
//	        uvarint len, key, uvarint token, u64 holder, varint grant,
//	        varint deadline−grant, uvarint waiters, then per waiter (FIFO):
//	        u64 conn, uvarint req_id, uvarint lease_ms, varint enqueued−grant,
//	        varint wait deadline−enqueued
//	        (version 2, protocol 1.1 key sets: after each waiter its set, and
//	        after each key's waiters the holder's set: uvarint count of keys,
//	        0 for none, then per key uvarint len, key)
//	labels  (version 3, protocol 1.1 connection labels, labels.go) after the
//	        keys: uvarint number of distinct labels, then each (sorted):
//	        uvarint len, label; uvarint number of labelled connections, then
//	        each (by connection id): u64 conn, uvarint label index, uvarint
//	        len, remote address, u8 flags (bit 0: orphan)
//
// Restore also reads the JSON encoding of earlier versions (its first
// byte is '{').
const (
	snapMagic   = "\x00TKS"
	snapVersion = 3 // 3: connection labels (§12.3); 2: key sets (§12.2); 1 and 2 are still read
)

var errBadSnapshot = errors.New("cluster: malformed snapshot")

// encodeSnapshot writes st (keys already sorted) to w.
func encodeSnapshot(w *bufio.Writer, st *fsmState) error {
	meta := *st
	meta.Table = locktable.State{}
	js, err := json.Marshal(&meta)
	if err != nil {
		return err
	}
	b := make([]byte, 0, 64)
	b = append(b, snapMagic...)
	b = append(b, snapVersion)
	b = binary.AppendUvarint(b, uint64(len(js)))
	if _, err := w.Write(b); err != nil {
		return err
	}
	if _, err := w.Write(js); err != nil {
		return err
	}
	b = binary.AppendUvarint(b[:0], uint64(len(st.Table.Keys)))
	for i := range st.Table.Keys {
		k := &st.Table.Keys[i]
		b = binary.AppendUvarint(b, uint64(len(k.Key)))
		b = append(b, k.Key...)
		b = binary.AppendUvarint(b, k.Token)
		b = binary.BigEndian.AppendUint64(b, k.Holder)
		b = binary.AppendVarint(b, k.Grant)
		b = binary.AppendVarint(b, k.Deadline-k.Grant)
		b = binary.AppendUvarint(b, uint64(len(k.Waiters)))
		for j := range k.Waiters {
			ws := &k.Waiters[j]
			b = binary.BigEndian.AppendUint64(b, ws.Owner.Conn)
			b = binary.AppendUvarint(b, uint64(ws.Owner.ReqID))
			b = binary.AppendUvarint(b, uint64(ws.LeaseMS))
			b = binary.AppendVarint(b, ws.Enqueued-k.Grant)
			b = binary.AppendVarint(b, ws.Deadline-ws.Enqueued)
			b = appendKeyList(b, ws.Set)
		}
		b = appendKeyList(b, k.Set)
		if len(b) >= 32<<10 {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = appendLabels(b, st.Labels)
	_, err = w.Write(b)
	return err
}

// appendLabels encodes the labels section (entries sorted by connection).
func appendLabels(b []byte, es []LabelEntry) []byte {
	ix := make(map[string]int, len(es))
	var strs []string
	for i := range es {
		if _, ok := ix[es[i].Label]; !ok {
			ix[es[i].Label] = 0
			strs = append(strs, es[i].Label)
		}
	}
	slices.Sort(strs)
	b = binary.AppendUvarint(b, uint64(len(strs)))
	for i, l := range strs {
		ix[l] = i
		b = binary.AppendUvarint(b, uint64(len(l)))
		b = append(b, l...)
	}
	b = binary.AppendUvarint(b, uint64(len(es)))
	for i := range es {
		e := &es[i]
		b = binary.BigEndian.AppendUint64(b, e.Conn)
		b = binary.AppendUvarint(b, uint64(ix[e.Label]))
		b = binary.AppendUvarint(b, uint64(len(e.Addr)))
		b = append(b, e.Addr...)
		var flags byte
		if e.Orphan {
			flags |= 1
		}
		b = append(b, flags)
	}
	return b
}

// labels reads what appendLabels wrote.
func (d *snapDecoder) labels() []LabelEntry {
	ns := d.uvarint(1 << 32)
	strs := make([]string, 0, min(ns, 1<<16))
	for i := uint64(0); i < ns && d.err == nil; i++ {
		l := make([]byte, d.uvarint(255))
		d.full(l)
		strs = append(strs, string(l))
	}
	nc := d.uvarint(1 << 40)
	var es []LabelEntry
	if nc > 0 {
		es = make([]LabelEntry, 0, min(nc, 1<<16))
	}
	for i := uint64(0); i < nc && d.err == nil; i++ {
		var e LabelEntry
		e.Conn = d.u64()
		if li := d.uvarint(1 << 32); d.err == nil {
			if li >= uint64(len(strs)) {
				d.fail(fmt.Errorf("label index %d of %d", li, len(strs)))
				break
			}
			e.Label = strs[li]
		}
		addr := make([]byte, d.uvarint(1<<10))
		d.full(addr)
		e.Addr = string(addr)
		var fl [1]byte
		d.full(fl[:])
		e.Orphan = fl[0]&1 != 0
		es = append(es, e)
	}
	return es
}

// decodeSnapshot reads a snapshot written by encodeSnapshot, or the JSON
// of earlier versions.
func decodeSnapshot(r io.Reader) (fsmState, error) {
	var s fsmState
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(len(snapMagic) + 1)
	if err != nil || string(head[:len(snapMagic)]) != snapMagic {
		// Not ours (or too short for it): the JSON encoding.
		err := json.NewDecoder(br).Decode(&s)
		return s, err
	}
	version := head[len(snapMagic)]
	if version < 1 || version > snapVersion {
		return s, fmt.Errorf("%w: version %d", errBadSnapshot, version)
	}
	_, _ = br.Discard(len(head))
	d := snapDecoder{r: br}
	js := make([]byte, d.uvarint(1<<30))
	d.full(js)
	if d.err == nil {
		if err := json.Unmarshal(js, &s); err != nil {
			return s, fmt.Errorf("%w: %v", errBadSnapshot, err)
		}
	}
	n := d.uvarint(1 << 40)
	s.Table.Keys = make([]locktable.KeyState, 0, min(n, 1<<20))
	for i := uint64(0); i < n && d.err == nil; i++ {
		var k locktable.KeyState
		key := make([]byte, d.uvarint(1<<16))
		d.full(key)
		k.Key = string(key)
		k.Token = d.uvarint(1<<64 - 1)
		k.Holder = d.u64()
		k.Grant = d.varint()
		k.Deadline = k.Grant + d.varint()
		if nw := d.uvarint(1 << 32); nw > 0 {
			k.Waiters = make([]locktable.WaiterState, 0, min(nw, 1<<16))
			for j := uint64(0); j < nw && d.err == nil; j++ {
				var ws locktable.WaiterState
				ws.Owner.Conn = d.u64()
				ws.Owner.ReqID = uint32(d.uvarint(1<<32 - 1))
				ws.LeaseMS = uint32(d.uvarint(1<<32 - 1))
				ws.Enqueued = k.Grant + d.varint()
				ws.Deadline = ws.Enqueued + d.varint()
				if version >= 2 {
					ws.Set = d.keyList()
				}
				k.Waiters = append(k.Waiters, ws)
			}
		}
		if version >= 2 {
			k.Set = d.keyList()
		}
		s.Table.Keys = append(s.Table.Keys, k)
	}
	if version >= 3 {
		s.Labels = d.labels()
	}
	if d.err == nil {
		if _, err := br.ReadByte(); err != io.EOF {
			d.err = fmt.Errorf("%w: trailing bytes", errBadSnapshot)
		}
	}
	return s, d.err
}

func appendKeyList(b []byte, keys []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
	}
	return b
}

// keyList reads what appendKeyList wrote (nil for none).
func (d *snapDecoder) keyList() []string {
	n := d.uvarint(16)
	if n == 0 {
		return nil
	}
	keys := make([]string, 0, n)
	for range n {
		key := make([]byte, d.uvarint(1<<16))
		d.full(key)
		keys = append(keys, string(key))
	}
	return keys
}

// snapDecoder reads the snapshot's fields, keeping the first error.
type snapDecoder struct {
	r   *bufio.Reader
	err error
	b   [8]byte
}

func (d *snapDecoder) fail(err error) {
	if d.err == nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = fmt.Errorf("%w: %v", errBadSnapshot, err)
	}
}

func (d *snapDecoder) uvarint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.fail(err)
		return 0
	}
	if v > limit {
		d.fail(fmt.Errorf("value %d above %d", v, limit))
		return 0
	}
	return v
}

func (d *snapDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *snapDecoder) u64() uint64 {
	d.full(d.b[:])
	if d.err != nil {
		return 0
	}
	return binary.BigEndian.Uint64(d.b[:])
}

func (d *snapDecoder) full(p []byte) {
	if d.err != nil {
		return
	}
	if _, err := io.ReadFull(d.r, p); err != nil {
		d.fail(err)
	}
}
