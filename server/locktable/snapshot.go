package locktable

import (
	"fmt"
	"math"
	"sort"

	"github.com/ticketing/ticketing/client/wire"
)

// WaiterState is one queued acquire in a State.
type WaiterState struct {
	Owner    Owner  `json:"owner"`
	LeaseMS  uint32 `json:"lease_ms"`
	Enqueued int64  `json:"enqueued"` // ns
	Deadline int64  `json:"deadline"` // wait deadline, ns
	// Set is every key of the waiting key set this waiter belongs to, in S
	// order (§12.2); nil for a single-key acquire. The set appears once in
	// the queue of each of its keys, with the same owner.
	Set []string `json:"set,omitempty"`
}

// KeyState is one held key in a State.
type KeyState struct {
	Key      string        `json:"key"`
	Token    uint64        `json:"token"`
	Holder   uint64        `json:"holder"`
	Grant    int64         `json:"grant"`    // ns
	Deadline int64         `json:"deadline"` // lease deadline, ns
	Waiters  []WaiterState `json:"waiters"`  // FIFO order
	// Set is every key of the holding key set, in S order, when the holder
	// is a set (each of its keys has a KeyState with the same token). Token 0
	// (no holder) is a key blocked for the waiting set at its queue's head.
	Set []string `json:"set,omitempty"`
}

// State is a table's complete lock state, in a deterministic order (keys
// sorted), for raft snapshots and for comparing tables across nodes.
type State struct {
	Keys []KeyState `json:"keys"`
}

// Snapshot returns the table's state, keys sorted. Counters and the idle
// cache are not part of it (they do not change any answer).
func (t *Table) Snapshot() State {
	s := t.SnapshotUnordered()
	s.Sort()
	return s
}

// SnapshotUnordered is Snapshot without the sort: the part that must run
// while nothing changes the table (a raft snapshot captures it under the
// state machine's lock and sorts and encodes it after).
func (t *Table) SnapshotUnordered() State {
	s := State{Keys: make([]KeyState, 0, t.active)}
	for i := range t.n {
		e := t.ent(i)
		if e.token == 0 {
			continue
		}
		var ks KeyState
		if e.token == blockedTok {
			ks = KeyState{Key: t.keyString(i)}
		} else {
			ks = KeyState{Key: t.keyString(i), Token: e.token, Holder: t.holderConn(e), Grant: e.grant, Deadline: e.lease}
			if hs := t.sets.get(e.token); hs != nil {
				ks.Set = t.heldKeys(hs)
			}
		}
		if q := t.queueOf(i); q != nil {
			for w := q.head; w != nil; w = w.next {
				ws := WaiterState{Owner: w.owner, LeaseMS: w.leaseMS, Enqueued: w.enqueued, Deadline: w.wait.at}
				if w.set != nil {
					ws.Set = t.waitingSetKeys(w.set)
				}
				ks.Waiters = append(ks.Waiters, ws)
			}
		}
		s.Keys = append(s.Keys, ks)
	}
	return s
}

// Sort puts the keys in order (State's deterministic order).
func (s *State) Sort() {
	sort.Slice(s.Keys, func(i, j int) bool { return s.Keys[i].Key < s.Keys[j].Key })
}

// Restore replaces the table's lock state with s (the table must be empty:
// fresh from New). The TokenSource is not touched; the caller restores it so
// that it continues above every token in s.
func (t *Table) Restore(s State) error {
	if t.n != 0 || t.active != 0 {
		return fmt.Errorf("locktable: restore into a non-empty table")
	}
	type pend struct {
		i   uint32
		key string
		ws  []WaiterState
	}
	var pends []pend
	type setPend struct {
		tok  uint64
		keys []string
	}
	var setKeys []setPend // keys of each held set, resolved to entries once all exist
	for _, ks := range s.Keys {
		if ks.Token == 0 && (len(ks.Waiters) == 0 || ks.Waiters[0].Set == nil) {
			return fmt.Errorf("locktable: restore: key %q has no holder", ks.Key)
		}
		if t.findString(ks.Key) != noEntry {
			return fmt.Errorf("locktable: restore: key %q twice", ks.Key)
		}
		i := t.newEntry([]byte(ks.Key))
		t.activate()
		e := t.ent(i)
		if ks.Token == 0 {
			e.token = blockedTok
			t.blocked++
		} else {
			e.token, e.holder, e.grant, e.lease = ks.Token, t.refConn(ks.Holder), ks.Grant, ks.Deadline
			t.lastTok = max(t.lastTok, e.token)
			t.pushLease(i)
			if ks.Set != nil && t.sets.get(ks.Token) == nil {
				if len(ks.Set) > wire.MaxSetKeys {
					return fmt.Errorf("locktable: restore: key set of %d keys", len(ks.Set))
				}
				hs := t.newHeldSet()
				hs.n, hs.conn = len(ks.Set), ks.Holder
				t.sets.put(ks.Token, hs)
				setKeys = append(setKeys, setPend{ks.Token, ks.Set})
			}
		}
		if len(ks.Waiters) > 0 {
			pends = append(pends, pend{i, ks.Key, ks.Waiters})
		}
	}
	for _, sp := range setKeys {
		tok, hs := sp.tok, t.sets.get(sp.tok)
		for k, key := range sp.keys {
			i := t.findString(key)
			if i == noEntry || t.ent(i).token != tok {
				return fmt.Errorf("locktable: restore: key %q of a key set is not held by it", key)
			}
			hs.ents[k] = i
		}
	}
	// Queue the waiters in an arrival order consistent with every queue: a
	// single waiter when it heads what is left of its queue, a set when it
	// heads what is left of all of its keys' queues.
	byKey := map[string]int{}
	for p, pd := range pends {
		byKey[pd.key] = p
	}
	for left := true; left; {
		moved := false
		left = false
		for p := range pends {
			pd := &pends[p]
			if len(pd.ws) == 0 {
				continue
			}
			left = true
			ws := pd.ws[0]
			if ws.Set == nil {
				if t.waiters[ws.Owner] != nil {
					return fmt.Errorf("locktable: restore: owner %v queued twice", ws.Owner)
				}
				w := t.newWaiter()
				w.owner, w.leaseMS, w.enqueued = ws.Owner, ws.LeaseMS, ws.Enqueued
				t.enqueue(pd.i, w, ws.Deadline)
				pd.ws = pd.ws[1:]
				moved = true
				continue
			}
			ready := len(ws.Set) >= wire.MinSetKeys && len(ws.Set) <= wire.MaxSetKeys
			for _, k := range ws.Set {
				q, ok := byKey[k]
				ready = ready && ok && len(pends[q].ws) > 0 && pends[q].ws[0].Owner == ws.Owner
			}
			if !ready {
				continue
			}
			if t.waiters[ws.Owner] != nil {
				return fmt.Errorf("locktable: restore: owner %v queued twice", ws.Owner)
			}
			st := &setw{n: len(ws.Set)}
			for k, key := range ws.Set {
				q := &pends[byKey[key]]
				w := t.newWaiter()
				w.owner, w.leaseMS, w.enqueued, w.set = ws.Owner, ws.LeaseMS, ws.Enqueued, st
				st.m[k] = w
				if k == 0 {
					t.enqueue(q.i, w, ws.Deadline)
				} else {
					t.linkQueue(q.i, w)
					w.wait.at = ws.Deadline
				}
				q.ws = q.ws[1:]
			}
			moved = true
		}
		if left && !moved {
			return fmt.Errorf("locktable: restore: waiting key sets are not in one order")
		}
	}
	return nil
}

// waitingSetKeys returns the keys of waiting set s, in S order.
func (t *Table) waitingSetKeys(s *setw) []string {
	keys := make([]string, s.n)
	for k, m := range s.m[:s.n] {
		keys[k] = t.keyString(m.q.e)
	}
	return keys
}

// DueKind tells what a due deadline is.
type DueKind uint8

// Kinds of due deadlines.
const (
	DueLease DueKind = 1 // a holder's lease ran out: Expire(key, token)
	DueWait  DueKind = 2 // a waiter's wait elapsed: WaitTimeout(owner)
)

// Due is one deadline at or before the instant given to Due.
type Due struct {
	Kind  DueKind
	Key   string
	Token uint64 // DueLease: the holder's token
	Owner Owner  // DueWait: the waiter
	At    int64  // the deadline, ns
	Grant int64  // DueLease: the grant instant, ns
}

// Due calls fn for each deadline at or before now without changing anything,
// so that a cluster leader can propose them as Expire / WaitTimeout commands
// (only the leader's clock decides, and the decision is replicated). The
// order is unspecified; fn returning false stops early.
func (t *Table) Due(now int64, fn func(Due) bool) {
	if !t.due(0, now, fn) {
		return
	}
	for l := range t.lanes {
		ln := &t.lanes[l]
		if ln.live == 0 {
			continue
		}
		for _, x := range ln.items[ln.head:] {
			if x == tombItem {
				continue
			}
			if at, _, _ := t.key(x); at > now {
				break // a lane is in deadline order
			}
			if !t.dueItem(x, fn) {
				return
			}
		}
	}
}

// dueItem calls fn for item x.
func (t *Table) dueItem(x uint32, fn func(Due) bool) bool {
	if x&waitBit == 0 {
		e := t.ent(x)
		return fn(Due{Kind: DueLease, Key: t.keyString(x), Token: e.token, At: e.lease, Grant: e.grant})
	}
	wt := t.waitRefs[x&^waitBit]
	return fn(Due{Kind: DueWait, Key: t.keyString(wt.w.q.e), Owner: wt.w.owner, At: wt.at})
}

func (t *Table) due(p int, now int64, fn func(Due) bool) bool {
	if p >= len(t.timers) {
		return true
	}
	x := t.timers[p]
	if at, _, _ := t.key(x); at > now {
		return true
	}
	if !t.dueItem(x, fn) {
		return false
	}
	return t.due(2*p+1, now, fn) && t.due(2*p+2, now, fn)
}

// ShiftLeases moves every lease deadline by delta ns (a new cluster leader
// adds the verified clock-skew bound, so that no lease ends early by its
// clock; protocol.md §7, docs/architecture.md). It never shortens a lease
// when delta ≥ 0.
func (t *Table) ShiftLeases(delta int64) {
	if delta == 0 {
		return
	}
	t.allToHeap()            // a lane mixing leases and waits would lose its order
	t.lowArm = math.MinInt64 // deadlines moved earlier: EarliestArmed says so
	for _, x := range t.timers {
		if x&waitBit == 0 {
			t.ent(x).lease += delta
		}
	}
	t.reheap() // waits did not move: leases and waits are in one heap
}

// WaitingConns returns the connections that have acquires queued in this
// table, sorted.
func (t *Table) WaitingConns() []uint64 {
	out := make([]uint64, 0, len(t.byConn))
	for c := range t.byConn {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
