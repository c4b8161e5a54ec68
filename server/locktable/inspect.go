package locktable

import (
	"iter"
	"strings"
)

// LockInfo describes one active key for admin `locks` (protocol.md §8).
type LockInfo struct {
	Key               string
	Token             uint64 // holder's fencing token
	LeaseRemainingMS  int64  // ms until the lease deadline (≥ 0)
	QueueDepth        int    // waiters
	OldestWaiterAgeMS int64  // ms the queue head has waited; 0 with no waiters
}

func (t *Table) activeStates() iter.Seq[*lockState] {
	return func(yield func(*lockState) bool) {
		for _, st := range t.keys {
			if st.token == 0 {
				continue
			}
			if !yield(st) {
				return
			}
		}
	}
}

// Locks calls fn for every held key whose name starts with prefix, in no
// particular order (callers sort). It stops when fn returns false.
func (t *Table) Locks(now int64, prefix string, fn func(LockInfo) bool) {
	for st := range t.activeStates() {
		if !strings.HasPrefix(st.key, prefix) {
			continue
		}
		li := LockInfo{Key: st.key, Token: st.token, QueueDepth: int(st.depth)}
		if r := st.lease.at - now; r > 0 {
			li.LeaseRemainingMS = r / 1e6
		}
		if st.head != nil {
			if a := now - st.head.enqueued; a > 0 {
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
	st := t.keys[key]
	if st == nil || st.token == 0 {
		return 0, 0, false
	}
	return st.token, st.lease.at, true
}

// HolderTimes returns when key's holder was granted and its recorded lease
// deadline (ns), or ok == false when the key is free.
func (t *Table) HolderTimes(key string) (grant, leaseDeadline int64, ok bool) {
	st := t.keys[key]
	if st == nil || st.token == 0 {
		return 0, 0, false
	}
	return st.grant, st.lease.at, true
}

// QueueOf returns the owners queued on key, head first.
func (t *Table) QueueOf(key string) []Owner {
	st := t.keys[key]
	if st == nil {
		return nil
	}
	var out []Owner
	for w := st.head; w != nil; w = w.next {
		out = append(out, w.owner)
	}
	return out
}
