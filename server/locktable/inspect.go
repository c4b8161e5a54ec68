package locktable

import "strings"

// LockInfo describes one active key for admin `locks` (protocol.md §8).
type LockInfo struct {
	Key               string
	Token             uint64       // holder's fencing token
	LeaseRemainingMS  int64        // ms until the lease deadline (≥ 0)
	QueueDepth        int          // waiters
	OldestWaiterAgeMS int64        // ms the queue head has waited; 0 with no waiters
	HolderConn        uint64       // the holder's connection
	Set               []string     // every key of the holding key set (S order); nil for a single key
	Waiters           []WaiterInfo // the first MaxWaiterInfo waiters, in queue order
}

// MaxWaiterInfo is how many waiters LockInfo lists per key (protocol.md §12.3).
const MaxWaiterInfo = 8

// WaiterInfo is one waiter in LockInfo.
type WaiterInfo struct {
	Conn     uint64
	WaitedMS int64
	Set      []string // the waiting key set's keys (S order); nil for a single key
}

// Locks calls fn for every held key whose name starts with prefix, and every
// key blocked for a waiting key set (Token 0, HolderConn 0), in no
// particular order (callers sort). It stops when fn returns false.
func (t *Table) Locks(now int64, prefix string, fn func(LockInfo) bool) {
	for i := range t.n {
		e := t.ent(i)
		if e.token == 0 {
			continue
		}
		if !e.long() {
			if k := e.inline(); len(k) < len(prefix) || string(k[:len(prefix)]) != prefix {
				continue
			}
		} else if !strings.HasPrefix(t.long[i], prefix) {
			continue
		}
		var li LockInfo
		if e.token == blockedTok {
			// nobody holds it, but a waiting key set heads its queue: listed
			// with token 0 (protocol.md §12.3)
			li = LockInfo{Key: t.keyString(i)}
		} else {
			li = LockInfo{Key: t.keyString(i), Token: e.token, HolderConn: t.holderConn(e)}
			if hs := t.sets.get(e.token); hs != nil {
				li.Set = t.heldKeys(hs)
			}
			if r := e.lease - now; r > 0 {
				li.LeaseRemainingMS = r / 1e6
			}
		}
		if q := t.queueOf(i); q != nil {
			li.QueueDepth = int(q.depth)
			if a := now - q.head.enqueued; a > 0 {
				li.OldestWaiterAgeMS = a / 1e6
			}
			for w := q.head; w != nil && len(li.Waiters) < MaxWaiterInfo; w = w.next {
				wi := WaiterInfo{Conn: w.owner.Conn, WaitedMS: max(now-w.enqueued, 0) / 1e6}
				if w.set != nil {
					wi.Set = t.waitingSetKeys(w.set)
				}
				li.Waiters = append(li.Waiters, wi)
			}
		}
		if !fn(li) {
			return
		}
	}
}

// Holder returns key's holder token and lease deadline (ns), or ok == false
// when the key is free.
func (t *Table) Holder(key string) (token uint64, leaseDeadline int64, ok bool) {
	i := t.findString(key)
	if i == noEntry || t.ent(i).token == 0 || t.ent(i).token == blockedTok {
		return 0, 0, false
	}
	return t.ent(i).token, t.ent(i).lease, true
}

// HolderTimes returns when key's holder was granted and its recorded lease
// deadline (ns), or ok == false when the key is free.
func (t *Table) HolderTimes(key string) (grant, leaseDeadline int64, ok bool) {
	i := t.findString(key)
	if i == noEntry || t.ent(i).token == 0 || t.ent(i).token == blockedTok {
		return 0, 0, false
	}
	return t.ent(i).grant, t.ent(i).lease, true
}

// QueueOf returns the owners queued on key, head first.
func (t *Table) QueueOf(key string) []Owner {
	i := t.findString(key)
	if i == noEntry {
		return nil
	}
	var out []Owner
	if q := t.queueOf(i); q != nil {
		for w := q.head; w != nil; w = w.next {
			out = append(out, w.owner)
		}
	}
	return out
}

// HoldsOrWaits reports whether connection conn holds a key or has an
// acquire queued in this table (the cluster's label table drops a closed
// connection's label once it holds and waits for nothing).
func (t *Table) HoldsOrWaits(conn uint64) bool {
	if r := t.connIx[conn]; r != 0 && t.conns[r-1].refs > 0 {
		return true
	}
	return t.byConn[conn] != nil
}
