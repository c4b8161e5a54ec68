// Package locktable is the lock state machine of protocol.md §5 and §6: FIFO
// queues with direct handoff, leases, wait deadlines, fencing tokens and the
// limits of §4. It is pure and deterministic: no I/O, no goroutines, no clock
// reads, no map iteration that decides output. Time arrives inside every
// command as a monotonic instant in nanoseconds (any epoch, as long as the
// caller keeps it consistent); the same command sequence gives the same state
// and effects on every machine.
//
// A Table is not safe for concurrent use; the single-node server shards keys
// over several tables, each behind its own mutex, and the cluster applies
// commands to one table in log order.
//
// Answers to the command's own caller are returned. Answers to other requests
// (a handoff to a waiter, a wait timeout, a lease-expiry handoff, a drain) go
// to the Sink, in the order they happen.
package locktable

import (
	"hash/maphash"
	"math"
	"slices"
	"time" // Duration only: the table reads no clock

	"github.com/ticketing/ticketing/client/wire"
)

// Owner identifies one request: the connection it came on and its req_id.
type Owner struct {
	Conn  uint64
	ReqID uint32
}

// Queued is the Status of an Effect that answers nothing yet: the acquire
// joined the key's queue and will be answered later through the Sink.
const Queued wire.Status = 0

// Effect is an answer to one request (protocol.md §3): status G T B O N (or
// Queued), the code for B, the fencing token and queued units for G. Acquire
// also answers E DUPLICATE_REQ_ID when its owner already has an acquire queued
// in this table (§2.1 check 3; the server normally catches that first).
type Effect struct {
	Owner  Owner
	Status wire.Status
	Code   wire.Code
	Queued uint16 // G: time waited in the queue, 16 ms units (§3)
	Token  uint64 // G: fencing token (§6)
}

// Sink receives answers to requests other than the one a command carries.
// Deliver must not call back into the Table.
type Sink interface {
	Deliver(e Effect)
}

// TokenSource issues fencing tokens (§6): every call returns a value strictly
// greater than every value returned before, across all tables sharing it.
// It must not fail; a source that cannot persist its high-water mark must stop
// the process rather than return.
type TokenSource interface {
	Next() uint64
}

// Limits are the table's bounds (§4). Zero fields mean "no bound".
type Limits struct {
	MaxKeys          int // keys held or queued on, across all tables sharing Counts (B OVERLOADED)
	MaxWaiters       int // queued acquires, across all tables sharing Counts (B OVERLOADED)
	MaxWaitersPerKey int // queued acquires on one key (B QUEUE_FULL)
	// LeaseSlack (ns) is added to every lease deadline: a caller that reads
	// its clock once per batch of commands, before the grants, keeps every
	// lease at least lease_ms long after its real grant instant (§5).
	LeaseSlack int64
	IdleCache  int // free key entries kept for reuse (no allocation on a re-acquire); 0 = default 4096, < 0 = none
}

// DefaultIdleCache is the IdleCache used when Limits.IdleCache is 0.
const DefaultIdleCache = 4096

// Counts are totals shared by every table of one server. Single-node shards
// update them under their own mutexes, so they are atomics.
type Counts interface {
	// AddKeys adjusts the count of active keys and returns the new value
	// (the table does not use it: a batching implementation may return only its part).
	AddKeys(delta int64) int64
	// AddWaiters adjusts the count of queued acquires and returns the new value.
	AddWaiters(delta int64) int64
	Keys() int64
	Waiters() int64
}

// Counters are cumulative event counts of one table (admin `status`, §8):
// the list is client/wire's AdminCounters. A table counts Grants (every G:
// first grants and handoffs), Handoffs (grants to a queued waiter), Timeouts
// (every T), Releases (every O to a release), NotHolder (every N), Expiries
// (leases that ran out), Busy (every B) and Cancels (waiters withdrawn by C);
// Errors and AuthFailures are the server's.
type Counters = wire.AdminCounters

// Table is one lock table (or one shard of it).
type Table struct {
	// the keys (entries.go)
	pages   []*[pageSize]entry
	n       uint32            // entries in use, numbered 0..n-1
	long    map[uint32]string // keys that are not inline, by entry
	seed    maphash.Seed
	slots   []uint32 // index: 1 + entry number; 0 = empty
	tags    []uint8  // index: a hash byte per slot
	ixN     int      // entries in the index (== n)
	old     []uint32 // index being migrated into slots (incremental resize); nil when none
	oldTags []uint8
	mig     int          // next slot of old to migrate
	ixMin   int          // smallest index size (0 = 16; tests lower it)
	ixStep  int          // old slots migrated per insert or removal (0 = 32; tests lower it)
	placed  uint64       // index placements so far (the incremental-resize test counts them)
	timers  []uint32     // armed lease and wait deadlines not in a lane: a heap (timers.go)
	lanes   [nLanes]lane // armed deadlines of the common durations, each lane in order (timers.go)
	noLanes bool         // tests: every timer goes to the heap
	lowArm  int64        // earliest deadline armed since EarliestArmed (MinInt64: unknown)
	idle    idleList     // free entries kept for reuse, oldest first

	conns    []connRef         // holders' connections (refConn)
	connIx   map[uint64]uint32 // reference of each connection in conns
	freeRefs []uint32
	lastRef  uint32 // the reference refConn returned last (a cache)
	zeroRefs int    // references kept that hold nothing (refConn)

	queues       map[uint32]*kqueue // queues of the keys that have waiters, by entry
	waiters      map[Owner]*waiter  // queued acquires by owner (cancel)
	byConn       map[uint64]*waiter // head of each connection's list of queued acquires
	waitRefs     []*timer           // armed wait timers by wait number (timers.go)
	freeWaitNums []uint32
	active       int // keys in this table held or queued on
	queued       int // waiters in this table
	limits       Limits
	counts       Counts
	tokens       TokenSource
	sink         Sink
	counter      Counters

	seq     uint64 // arm order of waits: ties between equal deadlines go FIFO
	lastTok uint64 // token of the last lease armed (leases are ordered by token)

	// key sets (sets.go)
	sets    setIndex // held key sets by token (setindex.go)
	blocked int      // entries blocked for a waiting set at their queue's head
	noTrim  bool     // a set operation runs: postpone idle trimming (entry numbers stay put)
	recheck []uint32 // blocked entries whose next head must be settled
	now     int64    // latest instant a command carried (for commands without one)

	// recycled structs, each list capped at the idle cache size so memory
	// falls back after a burst
	freeWaiters  *waiter
	freeQueues   *kqueue
	freeSets     *heldSet
	nFreeWaiters int
	nFreeQueues  int
	nFreeSets    int
}

// kqueue is the FIFO queue of one held key's waiters.
type kqueue struct {
	e          uint32 // the key's entry
	depth      int32  // waiters queued (bounded by memory, far below 2^31)
	head, tail *waiter
	nextFree   *kqueue
}

type waiter struct {
	owner    Owner
	q        *kqueue
	leaseMS  uint32
	enqueued int64  // instant it joined the queue (ns)
	wait     timer  // wait deadline
	after    uint64 // token of the last lease armed before the wait: a tie with a lease goes to the earlier armed
	prev     *waiter
	next     *waiter
	cprev    *waiter // per-connection list
	cnext    *waiter
	set      *setw // the waiting key set this waiter is a member of; nil for a single key
}

// New returns an empty table. tokens, counts and sink must not be nil.
func New(limits Limits, tokens TokenSource, counts Counts, sink Sink) *Table {
	switch {
	case limits.IdleCache == 0:
		limits.IdleCache = DefaultIdleCache
	case limits.IdleCache < 0:
		limits.IdleCache = 0 // no idle cache (a negative bound used to panic)
	}
	return &Table{
		seed:    maphash.MakeSeed(), // the index's layout decides no output
		lowArm:  math.MinInt64,
		idle:    idleList{head: noEntry, tail: noEntry},
		queues:  make(map[uint32]*kqueue),
		waiters: make(map[Owner]*waiter),
		byConn:  make(map[uint64]*waiter),
		limits:  limits,
		counts:  counts,
		tokens:  tokens,
		sink:    sink,
	}
}

// Counters returns the table's cumulative counters.
func (t *Table) Counters() Counters { return t.counter }

// ActiveKeys is the number of keys in this table that are held or have waiters.
func (t *Table) ActiveKeys() int { return t.active }

// Waiters is the number of acquires queued in this table.
func (t *Table) Waiters() int { return t.queued }

// Holders is the number of held keys in this table.
func (t *Table) Holders() int {
	// an active key is held, or blocked for a waiting key set (sets.go)
	return t.active - t.blocked
}

func msToNs(ms uint32) int64 { return int64(ms) * 1e6 }

// queueOf returns entry i's queue, nil when it has no waiters.
func (t *Table) queueOf(i uint32) *kqueue {
	if t.queued == 0 {
		return nil
	}
	return t.queues[i]
}

// Acquire applies acquire(key, lease_ms, wait_ms) from owner at now (§5).
// key must already be valid (§2.1); leaseMS ≥ 1. It returns G with a fresh
// token when the key is free, T when wait is 0 and the key is held, B
// QUEUE_FULL or B OVERLOADED at a limit, or Queued: the answer comes later
// through the Sink (G on handoff, T when the wait elapses). An owner that
// already has an acquire queued in this table is answered E DUPLICATE_REQ_ID
// and nothing changes (re-registering it would corrupt the owner index).
func (t *Table) Acquire(now int64, owner Owner, key []byte, leaseMS, waitMS uint32) Effect {
	if t.queued > 0 && t.waiters[owner] != nil { // queued: no map load when nothing waits
		return Effect{Owner: owner, Status: wire.StatusError, Code: wire.CodeDuplicateReqID}
	}
	i := t.findBytes(key)
	if i == noEntry || t.ent(i).token == 0 {
		if t.limits.MaxKeys > 0 && t.counts.Keys() >= int64(t.limits.MaxKeys) {
			t.counter.Busy++
			return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeOverloaded}
		}
		if i == noEntry {
			i = t.newEntry(key)
		} else {
			t.idleRemove(i)
		}
		t.activate()
		t.grant(now, i, owner.Conn, leaseMS)
		return Effect{Owner: owner, Status: wire.StatusGranted, Token: t.ent(i).token}
	}
	if waitMS == 0 {
		t.counter.Timeouts++
		return Effect{Owner: owner, Status: wire.StatusTimeout}
	}
	q := t.queueOf(i)
	if t.limits.MaxWaitersPerKey > 0 && q != nil && int(q.depth) >= t.limits.MaxWaitersPerKey {
		t.counter.Busy++
		return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeQueueFull}
	}
	if t.limits.MaxWaiters > 0 && t.counts.Waiters() >= int64(t.limits.MaxWaiters) {
		t.counter.Busy++
		return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeOverloaded}
	}
	w := t.newWaiter()
	w.owner = owner
	w.leaseMS = leaseMS
	w.enqueued = now
	t.enqueue(i, w, addNs(now, msToNs(waitMS)))
	return Effect{Owner: owner, Status: Queued}
}

// enqueue links w (owner, leaseMS, enqueued set) at the tail of entry i's
// queue and into the owner and connection indexes, and arms its wait deadline.
func (t *Table) enqueue(i uint32, w *waiter, deadline int64) {
	t.linkQueue(i, w)
	if h := t.byConn[w.owner.Conn]; h != nil {
		w.cnext = h
		h.cprev = w
	}
	t.byConn[w.owner.Conn] = w
	t.waiters[w.owner] = w
	t.queued++
	t.counts.AddWaiters(1)
	w.wait.at = deadline
	w.wait.w = w
	w.after = t.lastTok
	t.arm(&w.wait)
}

// Release applies release(key, token) at now (§5): O when token is the
// holder's (the queue head, if any, is granted at once with a new token:
// direct handoff), N otherwise.
func (t *Table) Release(now int64, owner Owner, key []byte, token uint64) Effect {
	i := t.findBytes(key)
	if i == noEntry || t.ent(i).token == 0 || t.ent(i).token != token || token == blockedTok ||
		(t.sets.n > 0 && t.sets.get(token) != nil) { // a set is released whole (§12.2)
		t.counter.NotHolder++
		return Effect{Owner: owner, Status: wire.StatusNotHolder}
	}
	t.counter.Releases++
	t.removeLease(i)
	t.handoffOrFree(now, i)
	if t.noTrim {
		t.endSetOp()
	}
	return Effect{Owner: owner, Status: wire.StatusReleased}
}

// Cancel applies cancel(key, target) from owner.Conn at now (§5): when the
// connection's acquire target is queued on key, that waiter leaves the queue,
// its acquire is answered T through the Sink, and Cancel returns O; otherwise N.
func (t *Table) Cancel(now int64, owner Owner, key []byte, target uint32) Effect {
	w := t.waiters[Owner{Conn: owner.Conn, ReqID: target}]
	if w == nil || !keyEq(t, w.q.e, key) {
		t.counter.NotHolder++
		return Effect{Owner: owner, Status: wire.StatusNotHolder}
	}
	t.counter.Cancels++
	t.counter.Timeouts++
	t.sink.Deliver(Effect{Owner: w.owner, Status: wire.StatusTimeout})
	if w.set != nil {
		t.withdrawSet(now, w.set)
		t.endSetOp()
	} else {
		t.dropWaiter(w)
	}
	return Effect{Owner: owner, Status: wire.StatusReleased}
}

// Outstanding reports whether owner has an acquire queued in this table
// (the duplicate req_id rule of §2.1 check 3).
func (t *Table) Outstanding(owner Owner) bool { return t.waiters[owner] != nil }

// DropConn removes every waiter of connection conn from its queue, silently
// (the connection closed, §5). Locks the connection holds stay held.
// It returns how many waiters left.
func (t *Table) DropConn(conn uint64) int {
	n := 0
	for w := t.byConn[conn]; w != nil; w = t.byConn[conn] {
		if w.set != nil {
			t.dropMembers(w.set, true)
		} else {
			t.dropWaiter(w)
		}
		n++
	}
	if t.noTrim {
		t.processRecheck(t.now)
		t.endSetOp()
	}
	return n
}

// DrainWaiters answers every waiter B SHUTTING_DOWN through the Sink and
// empties every queue (§5, the server starts draining). Holders keep their
// locks. Waiters are answered in the order they queued (across keys too), so
// the delivery order is deterministic.
func (t *Table) DrainWaiters() int {
	ws := make([]*waiter, 0, len(t.waiters))
	for _, w := range t.waiters {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *waiter) int { return cmpU64(a.wait.seq, b.wait.seq) })
	for _, w := range ws {
		t.counter.Busy++
		t.sink.Deliver(Effect{Owner: w.owner, Status: wire.StatusBusy, Code: wire.CodeShuttingDown})
		if w.set != nil {
			t.dropMembers(w.set, false)
		} else {
			t.dropWaiter(w)
		}
	}
	t.freeOrphans()
	t.endSetOp()
	return len(ws)
}

// next returns the earliest armed timer by (deadline, arm order): a lease
// (entry number, w nil) or a wait (w). ok is false when none is armed.
func (t *Table) next() (at int64, lease uint32, w *waiter, ok bool) {
	x, ok := t.first()
	if !ok {
		return 0, noEntry, nil, false
	}
	if x&waitBit == 0 {
		return t.ent(x).lease, x, nil, true
	} else {
		wt := t.waitRefs[x&^waitBit]
		return wt.at, noEntry, wt.w, true
	}
}

// NextDeadline returns the earliest pending lease or wait deadline (ns), and
// false when none is armed.
func (t *Table) NextDeadline() (int64, bool) {
	at, _, _, ok := t.next()
	return at, ok
}

// Advance applies every lease expiry and wait timeout due at or before now,
// in deadline order, and returns how many it applied. Expired leases hand off
// to the queue head (a new token); timed-out waiters are answered T.
func (t *Table) Advance(now int64) int {
	t.now = max(t.now, now)
	n := 0
	for {
		at, i, w, ok := t.next()
		if !ok || at > now {
			if t.noTrim {
				t.endSetOp()
			}
			return n
		}
		if w != nil {
			t.timeoutWaiter(now, w)
		} else {
			t.expire(now, i)
		}
		n++
	}
}

// Expire ends the lease of key's holder at now if token is still the holder's
// (a stale expiry is ignored), handing off to the queue head. It reports
// whether anything changed. The cluster uses it to replicate an expiry the
// leader's timer decided.
func (t *Table) Expire(now int64, key []byte, token uint64) bool {
	t.now = max(t.now, now)
	i := t.findBytes(key)
	if i == noEntry || t.ent(i).token == 0 || t.ent(i).token != token || token == blockedTok {
		return false
	}
	t.expire(now, i)
	t.endSetOp()
	return true
}

// WaitTimeout answers owner's queued acquire T and removes it (its wait
// elapsed). It reports whether the waiter was still queued.
func (t *Table) WaitTimeout(owner Owner) bool {
	w := t.waiters[owner]
	if w == nil {
		return false
	}
	t.timeoutWaiter(t.now, w)
	t.endSetOp()
	return true
}

func (t *Table) timeoutWaiter(now int64, w *waiter) {
	t.counter.Timeouts++
	if s := w.set; s != nil {
		t.sink.Deliver(Effect{Owner: s.m[0].owner, Status: wire.StatusTimeout})
		t.withdrawSet(now, s)
		return
	}
	t.sink.Deliver(Effect{Owner: w.owner, Status: wire.StatusTimeout})
	t.dropWaiter(w)
}

func (t *Table) expire(now int64, i uint32) {
	t.counter.Expiries++
	if t.sets.n > 0 {
		if tok := t.ent(i).token; t.sets.get(tok) != nil {
			t.freeSet(now, tok, t.sets.get(tok)) // the lease covers every key: all end at once
			return
		}
	}
	t.removeLease(i)
	t.handoffOrFree(now, i)
}

// handoffOrFree grants entry i to its first waiter whose wait has not
// elapsed (waiters whose wait elapsed are answered T: they are never
// granted), or frees it. The lease must already be disarmed. Entry numbers
// may change afterwards (a free entry beyond the idle cache is removed).
func (t *Table) handoffOrFree(now int64, i uint32) {
	tok0 := t.ent(i).token // the ending holder's token, or blockedTok
	for q := t.queueOf(i); q != nil; q = t.queueOf(i) {
		w := q.head
		if w.wait.at <= now {
			t.timeoutWaiter(now, w)
			if t.ent(i).token != tok0 {
				return // a set's withdrawal settled this blocked key already
			}
			continue
		}
		if w.set != nil {
			// a waiting key set heads the queue: the key is blocked for it
			// (nobody behind takes it) and the set is granted if it can be
			if e := t.ent(i); e.token != blockedTok {
				t.unrefConn(e.holder)
				e.token, e.holder, e.grant = blockedTok, 0, 0
				t.blocked++
			}
			t.trySetGrant(now, w.set)
			return
		}
		owner, leaseMS, enq := w.owner, w.leaseMS, w.enqueued
		t.dropWaiter(w)
		if e := t.ent(i); e.token != blockedTok {
			t.unrefConn(e.holder)
		} else {
			t.blocked--
		}
		t.grant(now, i, owner.Conn, leaseMS)
		t.counter.Handoffs++
		t.sink.Deliver(Effect{
			Owner:  owner,
			Status: wire.StatusGranted,
			Token:  t.ent(i).token,
			Queued: wire.QueuedUnits(time.Duration(now - enq)),
		})
		return
	}
	e := t.ent(i)
	if e.token != blockedTok {
		t.unrefConn(e.holder)
	} else {
		t.blocked--
	}
	e.token = 0
	e.holder = 0
	e.grant = 0
	t.deactivate(i)
}

func (t *Table) grant(now int64, i uint32, conn uint64, leaseMS uint32) {
	e := t.ent(i)
	e.token = t.tokens.Next()
	e.holder = t.refConn(conn)
	e.grant = now
	e.lease = addNs(now, msToNs(leaseMS)+t.limits.LeaseSlack)
	t.lastTok = e.token
	t.pushLease(i)
	t.counter.Grants++
}

// addNs is now+d saturating at MaxInt64 (leaseMS and waitMS ≤ 2^32-1 ms cannot
// overflow int64 ns from sane instants; this guards insane ones).
func addNs(now, d int64) int64 {
	if at := now + d; at >= now {
		return at
	}
	return math.MaxInt64
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// dropWaiter unlinks w from its key queue (freeing the queue when it empties),
// its connection list, the owner index and the wait heap, and recycles it.
func (t *Table) dropWaiter(w *waiter) {
	t.unlinkQueue(w)
	if w.cprev != nil {
		w.cprev.cnext = w.cnext
	} else if w.cnext != nil {
		t.byConn[w.owner.Conn] = w.cnext
	} else {
		delete(t.byConn, w.owner.Conn)
	}
	if w.cnext != nil {
		w.cnext.cprev = w.cprev
	}
	delete(t.waiters, w.owner)
	t.disarm(&w.wait)
	t.queued--
	t.counts.AddWaiters(-1)
	t.recycleWaiter(w)
}

// recycleWaiter keeps w for reuse (up to the idle cache size).
func (t *Table) recycleWaiter(w *waiter) {
	if t.nFreeWaiters < t.limits.IdleCache {
		*w = waiter{next: t.freeWaiters}
		t.freeWaiters = w
		t.nFreeWaiters++
	} else {
		*w = waiter{} // left to the GC; drop stale links
	}
}

func (t *Table) newWaiter() *waiter {
	if w := t.freeWaiters; w != nil {
		t.freeWaiters = w.next
		t.nFreeWaiters--
		w.next = nil
		return w
	}
	return &waiter{}
}

func (t *Table) newQueue(i uint32) *kqueue {
	q := t.freeQueues
	if q != nil {
		t.freeQueues = q.nextFree
		t.nFreeQueues--
		*q = kqueue{}
	} else {
		q = &kqueue{}
	}
	q.e = i
	t.queues[i] = q
	return q
}

func (t *Table) dropQueue(q *kqueue) {
	delete(t.queues, q.e)
	*q = kqueue{}
	if t.nFreeQueues < t.limits.IdleCache {
		q.nextFree = t.freeQueues
		t.freeQueues = q
		t.nFreeQueues++
	}
}

func (t *Table) activate() {
	t.active++
	t.counts.AddKeys(1)
}

// deactivate moves free entry i (no waiters) to the idle cache, removing the
// oldest idle entries beyond the cache size.
func (t *Table) deactivate(i uint32) {
	t.active--
	t.counts.AddKeys(-1)
	t.idlePush(i)
	for !t.noTrim && t.idle.n > t.limits.IdleCache {
		old := t.idle.head
		t.idleRemove(old)
		t.removeEntry(old)
	}
}
