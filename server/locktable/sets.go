package locktable

import (
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Atomic key sets (protocol.md §12.2): one request for 2–16 keys, one lease,
// one wait and one fencing token for the whole set.
//
// A waiting set is one member waiter per key, each in its key's FIFO queue,
// all entered at one instant. The first member (the set's first key, as
// sent) is the one the table indexes: by owner (cancel names the first key),
// in its connection's list, and with the set's wait deadline armed; a set
// counts once as a waiter. A key whose queue head is a waiting set and that
// has no holder is blocked (token blockedTok): it is not free, so no one
// behind the set (and no new acquire) takes it, and it is not held either (no
// lease, no holder). A set is granted when it is at the head of every one of
// its keys' queues and every one of them is blocked: then all its keys are
// held at once under one token. Because a set enters all its queues at one
// point of the table's order, an earlier request is ahead of a later one on
// every key they share, so no cycle of waits can form.
//
// A held set is its keys' entries, each holding the set's token, plus a
// record in Table.sets (by token) that makes R on one of its keys N, X
// release the exact set, and an expiry of any of its keys free them all.
// Entry numbers do not change while a set operation runs (Table.noTrim
// postpones the idle cache's trimming, the only thing that renumbers).

// blockedTok is the token of a blocked entry: free, but a waiting key set is
// at its queue's head. No grant ever issues it (tokens are far below 2^64).
const blockedTok = ^uint64(0)

// setw is a waiting key set.
type setw struct {
	n int
	m [wire.MaxSetKeys]*waiter // members in the order of the S body; m[0] is indexed
}

// heldSet is a held key set: its keys' entries, not their strings (issue 35:
// no key copies and no re-hashing on release), recycled through
// Table.freeSets. moveEntry keeps the entry numbers right.
type heldSet struct {
	n        int
	ents     [wire.MaxSetKeys]uint32 // in the order of the S body
	conn     uint64
	nextFree *heldSet
}

// heldKeys returns hs's keys in S order (it allocates: for admin and snapshots).
func (t *Table) heldKeys(hs *heldSet) []string {
	keys := make([]string, hs.n)
	for k, i := range hs.ents[:hs.n] {
		keys[k] = t.keyString(i)
	}
	return keys
}

func (t *Table) newHeldSet() *heldSet {
	if hs := t.freeSets; hs != nil {
		t.freeSets = hs.nextFree
		t.nFreeSets--
		hs.nextFree = nil
		return hs
	}
	return &heldSet{}
}

func (t *Table) recycleHeldSet(hs *heldSet) {
	if t.nFreeSets >= t.limits.IdleCache {
		return
	}
	*hs = heldSet{nextFree: t.freeSets}
	t.freeSets = hs
	t.nFreeSets++
}

// renumberSet replaces entry from by to in the held set of token tok, if any.
func (t *Table) renumberSet(tok uint64, from, to uint32) {
	hs := t.sets.get(tok)
	if hs == nil {
		return
	}
	for k, i := range hs.ents[:hs.n] {
		if i == from {
			hs.ents[k] = to
		}
	}
}

// seqOf is the arrival order of w's request (a set's members share the first one's).
func seqOf(w *waiter) uint64 {
	if w.set != nil {
		return w.set.m[0].wait.seq
	}
	return w.wait.seq
}

// IsSetToken reports whether token is the token of a held key set.
func (t *Table) IsSetToken(token uint64) bool { return t.sets.n > 0 && t.sets.get(token) != nil }

// SetKeys returns the keys of the held set with token (S order), nil when none.
func (t *Table) SetKeys(token uint64) []string {
	if hs := t.sets.get(token); hs != nil {
		return t.heldKeys(hs)
	}
	return nil
}

// AcquireSet applies S (§12.2) from owner at now: keys are 2–16 distinct
// valid keys (the caller checked §12.2 steps 2–9), leaseMS ≥ 1. Answers as
// Acquire: G with one token for every key when every key is free with an
// empty queue; T when wait is 0 and some key is held or queued; B QUEUE_FULL
// when any key's queue is full, B OVERLOADED at max_keys (each new key) or
// max_waiters (the set counts once); otherwise Queued, answered later through
// the Sink.
func (t *Table) AcquireSet(now int64, owner Owner, keys [][]byte, leaseMS, waitMS uint32) Effect {
	e, _ := t.acquireSet(now, owner, keys, leaseMS, waitMS, false)
	return e
}

// AcquireSetKnown is AcquireSet on a table that must already have an entry
// (held, queued on or idle) for every key: known is false, and nothing
// changed, when one has none. The single node's set table uses it: a key
// with an entry there is one moved there (server/backend_sets.go).
func (t *Table) AcquireSetKnown(now int64, owner Owner, keys [][]byte, leaseMS, waitMS uint32) (e Effect, known bool) {
	return t.acquireSet(now, owner, keys, leaseMS, waitMS, true)
}

func (t *Table) acquireSet(now int64, owner Owner, keys [][]byte, leaseMS, waitMS uint32, known bool) (Effect, bool) {
	var ents [wire.MaxSetKeys]uint32
	allFree, fresh := true, 0
	for k, key := range keys {
		i := t.findBytes(key)
		ents[k] = i
		if i == noEntry {
			if known {
				return Effect{}, false
			}
			fresh++
		} else if t.ent(i).token == 0 {
			fresh++
		} else {
			allFree = false
		}
	}
	return t.acquireSetFound(now, owner, keys, &ents, allFree, fresh, leaseMS, waitMS), true
}

// acquireSetFound is AcquireSet once keys' entries (ents, noEntry when
// none) were found: allFree when none is active, fresh of them not active.
func (t *Table) acquireSetFound(now int64, owner Owner, keys [][]byte, ents *[wire.MaxSetKeys]uint32, allFree bool, fresh int, leaseMS, waitMS uint32) Effect {
	t.now = max(t.now, now)
	if t.queued > 0 && t.waiters[owner] != nil {
		return Effect{Owner: owner, Status: wire.StatusError, Code: wire.CodeDuplicateReqID}
	}
	if fresh > 0 && t.limits.MaxKeys > 0 && t.counts.Keys()+int64(fresh) > int64(t.limits.MaxKeys) {
		t.counter.Busy++
		return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeOverloaded}
	}
	if allFree {
		for k, key := range keys {
			ents[k] = t.activateKey(ents[k], key)
		}
		tok := t.grantSet(now, ents[:len(keys)], owner.Conn, leaseMS)
		return Effect{Owner: owner, Status: wire.StatusGranted, Token: tok}
	}
	if waitMS == 0 {
		t.counter.Timeouts++
		return Effect{Owner: owner, Status: wire.StatusTimeout}
	}
	if t.limits.MaxWaitersPerKey > 0 {
		for k := range keys {
			if i := ents[k]; i != noEntry {
				if q := t.queueOf(i); q != nil && int(q.depth) >= t.limits.MaxWaitersPerKey {
					t.counter.Busy++
					return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeQueueFull}
				}
			}
		}
	}
	if t.limits.MaxWaiters > 0 && t.counts.Waiters() >= int64(t.limits.MaxWaiters) {
		t.counter.Busy++
		return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeOverloaded}
	}
	s := &setw{n: len(keys)}
	deadline := addNs(now, msToNs(waitMS))
	for k, key := range keys {
		i := ents[k]
		if i == noEntry || t.ent(i).token == 0 {
			i = t.activateKey(i, key)
			t.block(i) // free with an empty queue: the set will be its head
		}
		w := t.newWaiter()
		w.owner, w.leaseMS, w.enqueued, w.set = owner, leaseMS, now, s
		s.m[k] = w
		if k == 0 {
			t.enqueue(i, w, deadline)
		} else {
			t.linkQueue(i, w)
			w.wait.at = deadline
		}
	}
	// Not grantable now: some key is held, or blocked for a set ahead of it.
	return Effect{Owner: owner, Status: Queued}
}

// activateKey makes the free (or unknown) key's entry active and returns its number.
func (t *Table) activateKey(i uint32, key []byte) uint32 {
	if i == noEntry {
		i = t.newEntry(key)
	} else {
		t.idleRemove(i)
	}
	t.activate()
	return i
}

func (t *Table) block(i uint32) {
	e := t.ent(i)
	if e.token != blockedTok {
		e.token, e.holder, e.grant = blockedTok, 0, 0
		t.blocked++
	}
}

// grantSet makes every entry of ents (active, free or blocked) held under one
// new token by conn and records the held set. It returns the token.
func (t *Table) grantSet(now int64, ents []uint32, conn uint64, leaseMS uint32) uint64 {
	tok := t.tokens.Next()
	hs := t.newHeldSet()
	hs.n, hs.conn = copy(hs.ents[:], ents), conn
	lease := addNs(now, msToNs(leaseMS)+t.limits.LeaseSlack)
	for _, i := range ents {
		e := t.ent(i)
		if e.token == blockedTok {
			t.blocked--
		}
		e.token = tok
		e.holder = t.refConn(conn)
		e.grant = now
		e.lease = lease
		t.pushLease(i)
	}
	t.lastTok = tok
	t.sets.put(tok, hs)
	t.counter.Grants++
	return tok
}

// linkQueue appends w at the tail of entry i's queue (no indexes).
func (t *Table) linkQueue(i uint32, w *waiter) {
	q := t.queues[i]
	if q == nil {
		q = t.newQueue(i)
	}
	w.q = q
	w.prev = q.tail
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.depth++
}

// unlinkQueue removes w from its key's queue, freeing the queue when it empties.
func (t *Table) unlinkQueue(w *waiter) {
	q := w.q
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	if q.depth--; q.depth == 0 {
		t.dropQueue(q)
	}
}

// trySetGrant grants waiting set s when it heads every one of its keys'
// queues and every key is blocked (free), and reports whether it did.
func (t *Table) trySetGrant(now int64, s *setw) bool {
	for _, m := range s.m[:s.n] {
		if m.q.head != m || t.ent(m.q.e).token != blockedTok {
			return false
		}
	}
	var ents [wire.MaxSetKeys]uint32
	for k, m := range s.m[:s.n] {
		ents[k] = m.q.e
	}
	w0 := s.m[0]
	owner, leaseMS, enq := w0.owner, w0.leaseMS, w0.enqueued
	t.dropMembers(s, false)
	tok := t.grantSet(now, ents[:s.n], owner.Conn, leaseMS)
	t.counter.Handoffs++
	t.sink.Deliver(Effect{Owner: owner, Status: wire.StatusGranted, Token: tok,
		Queued: wire.QueuedUnits(time.Duration(now - enq))})
	return true
}

// dropMembers takes waiting set s out of every queue and index. With recheck,
// its blocked keys are put on the recheck list (their next head may now be
// granted; processRecheck does it).
func (t *Table) dropMembers(s *setw, recheck bool) {
	t.noTrim = true
	for k := s.n - 1; k >= 0; k-- {
		m := s.m[k]
		if i := m.q.e; recheck && t.ent(i).token == blockedTok {
			t.recheck = append(t.recheck, i)
		}
		if k == 0 {
			t.dropWaiter(m)
			continue
		}
		t.unlinkQueue(m)
		t.recycleWaiter(m)
	}
}

// withdrawSet takes waiting set s out of every queue at once (wait timeout,
// cancel) and hands each of its keys to its next head.
func (t *Table) withdrawSet(now int64, s *setw) {
	t.dropMembers(s, true)
	t.processRecheck(now)
}

// processRecheck settles every blocked entry on the recheck list: granted to
// its next head, blocked for a set at its head, or freed.
func (t *Table) processRecheck(now int64) {
	for n := len(t.recheck); n > 0; n = len(t.recheck) {
		i := t.recheck[n-1]
		t.recheck = t.recheck[:n-1]
		if t.ent(i).token == blockedTok {
			t.handoffOrFree(now, i)
		}
	}
}

// freeSet ends held set hs (token tok): all its keys are freed at once, then
// each is handed to its next head in the set's key order (§12.2).
func (t *Table) freeSet(now int64, tok uint64, hs *heldSet) {
	t.sets.del(tok)
	t.noTrim = true
	for _, i := range hs.ents[:hs.n] {
		t.removeLease(i)
		t.unrefConn(t.ent(i).holder)
		e := t.ent(i)
		e.token, e.holder, e.grant = blockedTok, 0, 0
		t.blocked++
	}
	for k := hs.n - 1; k >= 0; k-- { // processRecheck pops: first key first
		t.recheck = append(t.recheck, hs.ents[k])
	}
	t.recycleHeldSet(hs)
	t.processRecheck(now)
}

// ReleaseSet applies X (§12.2): O when token is a held set's and keys are
// exactly its keys (any order; the caller checked they are distinct), every
// key then freed at once and handed to its next head; otherwise N.
func (t *Table) ReleaseSet(now int64, owner Owner, keys [][]byte, token uint64) Effect {
	t.now = max(t.now, now)
	hs := t.sets.get(token)
	if hs == nil || len(keys) != hs.n {
		t.counter.NotHolder++
		return Effect{Owner: owner, Status: wire.StatusNotHolder}
	}
	for _, k := range keys {
		found := false
		for _, i := range hs.ents[:hs.n] {
			if keyEq(t, i, k) {
				found = true
				break
			}
		}
		if !found {
			t.counter.NotHolder++
			return Effect{Owner: owner, Status: wire.StatusNotHolder}
		}
	}
	t.counter.Releases++
	t.freeSet(now, token, hs)
	t.endSetOp()
	return Effect{Owner: owner, Status: wire.StatusReleased}
}

// endSetOp runs the idle cache trimming a set operation postponed.
func (t *Table) endSetOp() {
	if !t.noTrim {
		return
	}
	t.noTrim = false
	for t.idle.n > t.limits.IdleCache {
		old := t.idle.head
		t.idleRemove(old)
		t.removeEntry(old)
	}
}

// freeOrphans frees blocked entries left without a queue (after a bulk drop).
func (t *Table) freeOrphans() {
	if t.blocked == 0 {
		return
	}
	t.noTrim = true
	for i := range t.n {
		if e := t.ent(i); e.token == blockedTok && t.queues[i] == nil {
			e.token = 0
			t.blocked--
			t.deactivate(i)
		}
	}
}

// ExtractKey removes key's whole state from the table without answering
// anyone (its holder and its waiters, FIFO) and returns it; ok is false when
// the key is not active. It is for moving a key between the tables of one
// server (the single node keeps the keys of key sets in one table); the key
// must not be part of a key set here.
func (t *Table) ExtractKey(key []byte) (KeyState, bool) {
	i := t.findBytes(key)
	if i == noEntry || t.ent(i).token == 0 {
		return KeyState{}, false
	}
	e := t.ent(i)
	ks := KeyState{Key: string(key), Token: e.token, Holder: t.holderConn(e), Grant: e.grant, Deadline: e.lease}
	if q := t.queueOf(i); q != nil {
		for w := q.head; w != nil; w = w.next {
			ks.Waiters = append(ks.Waiters, WaiterState{Owner: w.owner, LeaseMS: w.leaseMS, Enqueued: w.enqueued, Deadline: w.wait.at})
		}
		for q := t.queueOf(i); q != nil; q = t.queueOf(i) {
			t.dropWaiter(q.head)
		}
	}
	t.removeLease(i)
	t.unrefConn(e.holder)
	e.token, e.holder, e.grant = 0, 0, 0
	t.deactivate(i)
	return ks, true
}

// InsertKey adds the state of one key (from ExtractKey of another table of
// the same server) to the table, where the key must not be active.
func (t *Table) InsertKey(ks KeyState) {
	i := t.activateKey(t.findString(ks.Key), []byte(ks.Key))
	e := t.ent(i)
	e.token, e.holder, e.grant, e.lease = ks.Token, t.refConn(ks.Holder), ks.Grant, ks.Deadline
	t.lastTok = max(t.lastTok, e.token)
	t.pushLease(i)
	for _, ws := range ks.Waiters {
		w := t.newWaiter()
		w.owner, w.leaseMS, w.enqueued = ws.Owner, ws.LeaseMS, ws.Enqueued
		t.enqueue(i, w, ws.Deadline)
	}
}

// ForgetIdle removes key's entry when the key is idle here (free, no
// waiters) and reports whether it is idle. The single node's set table uses
// it when a key goes back to its shard (server/backend_sets.go). Not during
// a command.
func (t *Table) ForgetIdle(key string) bool {
	i := t.findString(key)
	if i == noEntry {
		return true
	}
	if t.ent(i).token != 0 {
		return false
	}
	t.idleRemove(i)
	t.removeEntry(i)
	return true
}

// Known reports whether the table has an entry for key: active, or idle in
// the idle cache.
func (t *Table) Known(key string) bool { return t.findString(key) != noEntry }

// IdleKey is Idle for a key in bytes (no copy).
func (t *Table) IdleKey(key []byte) bool {
	i := t.findBytes(key)
	return i == noEntry || t.ent(i).token == 0
}

// Idle reports whether key is free with no waiters here (not active).
func (t *Table) Idle(key string) bool {
	i := t.findString(key)
	return i == noEntry || t.ent(i).token == 0
}
