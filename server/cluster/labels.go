package cluster

import (
	"slices"

	"github.com/ticketing/ticketing/server/locktable"
)

// Replicated connection labels (protocol.md §12.3): the leader that serves a
// connection sends its label (and remote address) once per serving term, in
// an OpLabel just before the connection's first acquire of that term (and
// again when the label changes), so that the locks that survive a leader
// change keep their holder's label on every node. A held lock refers to its
// holder's connection (the lock table's 32-bit connection reference); the
// connection refers to its interned label: per held lock the label costs
// nothing more, per labelled connection one map slot, the address and a
// pointer to the shared label string.
//
// A connection's entry goes when it can neither hold nor get anything more:
// it is an orphan (its connection closed — OpDropConn — or every
// connection is, after a LeaderStart: the new leader's connections send
// their labels again) and the table shows it holds and waits for nothing.
// Orphans are swept at each LeaderStart, when they are dropped, and
// amortized over the lock commands applied (sweepOps), so the table stays
// bounded by the labelled connections that hold or wait, plus as many
// again. Every step depends only on the applied commands: the same on
// every node.

// labelRec is one interned label with the number of connections naming it.
type labelRec struct {
	s    string
	refs int
}

// connLabel is one labelled connection's entry.
type connLabel struct {
	l      *labelRec
	addr   string
	orphan bool // no command will come from the connection any more
}

// labelTable is the FSM's replicated label state (guarded by FSM.mu).
type labelTable struct {
	byStr   map[string]*labelRec
	conns   map[uint64]*connLabel
	orphans int // entries with orphan set
	ops     int // lock commands applied since the last sweep
}

// LabelEntry is one labelled connection in a snapshot.
type LabelEntry struct {
	Conn   uint64
	Label  string
	Addr   string
	Orphan bool
}

// set gives conn its label and address ("" label: none, the entry goes).
func (lt *labelTable) set(conn uint64, label, addr string) {
	if cl := lt.conns[conn]; cl != nil {
		lt.remove(conn, cl)
	}
	if label == "" {
		return
	}
	r := lt.byStr[label]
	if r == nil {
		if lt.byStr == nil {
			lt.byStr = make(map[string]*labelRec)
			lt.conns = make(map[uint64]*connLabel)
		}
		r = &labelRec{s: label}
		lt.byStr[label] = r
	}
	r.refs++
	lt.conns[conn] = &connLabel{l: r, addr: addr}
}

func (lt *labelTable) remove(conn uint64, cl *connLabel) {
	delete(lt.conns, conn)
	if cl.orphan {
		lt.orphans--
	}
	if cl.l.refs--; cl.l.refs == 0 {
		delete(lt.byStr, cl.l.s)
	}
}

// get returns conn's label and address.
func (lt *labelTable) get(conn uint64) (label, addr string, ok bool) {
	cl := lt.conns[conn]
	if cl == nil {
		return "", "", false
	}
	return cl.l.s, cl.addr, true
}

// orphan marks conn's entry an orphan (its connection closed) and removes
// it when the connection holds and waits for nothing.
func (lt *labelTable) orphan(t *locktable.Table, conn uint64) {
	cl := lt.conns[conn]
	if cl == nil {
		return
	}
	if !t.HoldsOrWaits(conn) {
		lt.remove(conn, cl)
		return
	}
	if !cl.orphan {
		cl.orphan = true
		lt.orphans++
	}
}

// orphanAll marks every entry an orphan (a LeaderStart) and sweeps.
func (lt *labelTable) orphanAll(t *locktable.Table) {
	for _, cl := range lt.conns {
		cl.orphan = true
	}
	lt.orphans = len(lt.conns)
	lt.sweep(t)
}

// counted counts one lock command applied; once there were as many as
// entries (at least sweepOps) it sweeps the orphans, so a sweep costs
// amortized O(1) per command.
func (lt *labelTable) counted(t *locktable.Table) {
	if lt.orphans == 0 {
		return
	}
	if lt.ops++; lt.ops >= max(len(lt.conns), sweepOps) {
		lt.sweep(t)
	}
}

// sweepOps is the fewest lock commands between two sweeps of orphans.
const sweepOps = 256

// sweep removes the orphans that hold and wait for nothing.
func (lt *labelTable) sweep(t *locktable.Table) {
	lt.ops = 0
	if lt.orphans == 0 {
		return
	}
	for conn, cl := range lt.conns {
		if cl.orphan && !t.HoldsOrWaits(conn) {
			lt.remove(conn, cl) // deleting during range is allowed; the outcome is order-free
		}
	}
}

// entries lists the table sorted by connection (snapshots).
func (lt *labelTable) entries() []LabelEntry {
	out := make([]LabelEntry, 0, len(lt.conns))
	for conn, cl := range lt.conns {
		out = append(out, LabelEntry{Conn: conn, Label: cl.l.s, Addr: cl.addr, Orphan: cl.orphan})
	}
	slices.SortFunc(out, func(a, b LabelEntry) int {
		switch {
		case a.Conn < b.Conn:
			return -1
		case a.Conn > b.Conn:
			return 1
		}
		return 0
	})
	return out
}

// restore rebuilds the table from a snapshot's entries and sweep count.
func restoreLabels(es []LabelEntry, ops int) labelTable {
	var lt labelTable
	for _, e := range es {
		lt.set(e.Conn, e.Label, e.Addr)
		if e.Orphan && lt.conns[e.Conn] != nil {
			lt.conns[e.Conn].orphan = true
			lt.orphans++
		}
	}
	lt.ops = ops
	return lt
}

// EncodeLabel is the key of an OpLabel: label_len u8 ‖ label ‖ addr.
func EncodeLabel(label, addr string) []byte {
	b := make([]byte, 0, 1+len(label)+len(addr))
	b = append(b, byte(len(label)))
	b = append(b, label...)
	return append(b, addr...)
}

// decodeLabel splits an OpLabel's key (ok false when malformed).
func decodeLabel(key []byte) (label, addr string, ok bool) {
	if len(key) == 0 || int(key[0]) > len(key)-1 {
		return "", "", false
	}
	n := int(key[0])
	return string(key[1 : 1+n]), string(key[1+n:]), true
}

// LabelLocked returns connection conn's replicated label and address (ok false
// when none is known). The caller holds the FSM's lock: call it from
// within With.
func (f *FSM) LabelLocked(conn uint64) (label, addr string, ok bool) {
	return f.labels.get(conn)
}
