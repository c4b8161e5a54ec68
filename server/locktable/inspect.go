package locktable

import "strings"

// LockInfo describes one active key for admin `locks` (protocol.md §8).
type LockInfo struct {
	Key               string
	Token             uint64 // holder's fencing token
	LeaseRemainingMS  int64  // ms until the lease deadline (≥ 0)
	QueueDepth        int    // waiters
	OldestWaiterAgeMS int64  // ms the queue head has waited; 0 with no waiters
}

// Locks calls fn for every held key whose name starts with prefix, in no
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
		li := LockInfo{Key: t.keyString(i), Token: e.token}
		if r := e.lease - now; r > 0 {
			li.LeaseRemainingMS = r / 1e6
		}
		if q := t.queueOf(i); q != nil {
			li.QueueDepth = int(q.depth)
			if a := now - q.head.enqueued; a > 0 {
				li.OldestWaiterAgeMS = a / 1e6
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
