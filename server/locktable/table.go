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
	// AddKeys adjusts the count of active keys and returns the new value.
	AddKeys(delta int64) int64
	// AddWaiters adjusts the count of queued acquires and returns the new value.
	AddWaiters(delta int64) int64
	Keys() int64
	Waiters() int64
}

// Counters are cumulative event counts of one table (admin `status`, §8).
type Counters struct {
	Grants    uint64 // every G (first grants and handoffs)
	Handoffs  uint64 // grants to a queued waiter (release or expiry handoff)
	Timeouts  uint64 // every T
	Releases  uint64 // every O to a release
	NotHolder uint64 // every N
	Expiries  uint64 // leases that ran out
	Busy      uint64 // every B
	Cancels   uint64 // waiters withdrawn by C
}

// Add accumulates o into c.
func (c *Counters) Add(o Counters) {
	c.Grants += o.Grants
	c.Handoffs += o.Handoffs
	c.Timeouts += o.Timeouts
	c.Releases += o.Releases
	c.NotHolder += o.NotHolder
	c.Expiries += o.Expiries
	c.Busy += o.Busy
	c.Cancels += o.Cancels
}

// Table is one lock table (or one shard of it).
type Table struct {
	keys    map[string]*lockState
	waiters map[Owner]*waiter  // queued acquires by owner (cancel)
	byConn  map[uint64]*waiter // head of each connection's list of queued acquires
	timers  timerHeap
	idle    stateList // free keys kept for reuse, oldest first
	active  int       // keys in this table held or queued on
	queued  int       // waiters in this table
	limits  Limits
	counts  Counts
	tokens  TokenSource
	sink    Sink
	counter Counters

	seq uint64 // arm order of timers: ties between equal deadlines go FIFO

	// recycled structs, each list capped at the idle cache size so memory
	// falls back after a burst
	freeStates   *lockState
	freeWaiters  *waiter
	nFreeStates  int
	nFreeWaiters int
}

type lockState struct {
	key    string
	token  uint64 // current holder's fencing token; 0 = free
	holder uint64 // holder's connection (information only: locks outlive connections)
	lease  timer  // lease deadline; armed while held
	grant  int64  // grant instant (ns)
	head   *waiter
	tail   *waiter
	// idle list links (while free with no waiters), or free-list link
	iprev, inext *lockState
	// depth (waiters queued; bounded by memory, far below 2^31) and inIdle
	// share one word; with the lease timer's back pointer gone (timer.st)
	// the state is 112 bytes, the 112-byte size class instead of 128
	// (issue #21; TestLockStateSize, TestHeldLockBytesNoAlloc)
	depth  int32
	inIdle bool
}

type waiter struct {
	owner    Owner
	st       *lockState
	leaseMS  uint32
	enqueued int64 // instant it joined the queue (ns)
	wait     timer // wait deadline
	prev     *waiter
	next     *waiter
	cprev    *waiter // per-connection list
	cnext    *waiter
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
		keys:    make(map[string]*lockState),
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
	// every active key with no holder has a queue only transiently (never:
	// a queue exists only behind a holder), so holders == active.
	return t.active
}

func msToNs(ms uint32) int64 { return int64(ms) * 1e6 }

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
	st := t.keys[string(key)] // no allocation for the lookup
	if st == nil || st.token == 0 {
		if t.limits.MaxKeys > 0 && t.counts.Keys() >= int64(t.limits.MaxKeys) {
			t.counter.Busy++
			return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeOverloaded}
		}
		if st == nil {
			st = t.newState(key)
		} else {
			t.idle.remove(st)
		}
		t.activate()
		t.grant(now, st, owner.Conn, leaseMS)
		return Effect{Owner: owner, Status: wire.StatusGranted, Token: st.token}
	}
	if waitMS == 0 {
		t.counter.Timeouts++
		return Effect{Owner: owner, Status: wire.StatusTimeout}
	}
	if t.limits.MaxWaitersPerKey > 0 && int(st.depth) >= t.limits.MaxWaitersPerKey {
		t.counter.Busy++
		return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeQueueFull}
	}
	if t.limits.MaxWaiters > 0 && t.counts.Waiters() >= int64(t.limits.MaxWaiters) {
		t.counter.Busy++
		return Effect{Owner: owner, Status: wire.StatusBusy, Code: wire.CodeOverloaded}
	}
	w := t.newWaiter()
	w.owner = owner
	w.st = st
	w.leaseMS = leaseMS
	w.enqueued = now
	t.enqueue(st, w, addNs(now, msToNs(waitMS)))
	return Effect{Owner: owner, Status: Queued}
}

// enqueue links w (owner, st, leaseMS, enqueued set) at the tail of st's
// queue and into the owner and connection indexes, and arms its wait deadline.
func (t *Table) enqueue(st *lockState, w *waiter, deadline int64) {
	w.prev = st.tail
	if st.tail != nil {
		st.tail.next = w
	} else {
		st.head = w
	}
	st.tail = w
	st.depth++
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
	t.arm(&w.wait)
}

// Release applies release(key, token) at now (§5): O when token is the
// holder's (the queue head, if any, is granted at once with a new token:
// direct handoff), N otherwise.
func (t *Table) Release(now int64, owner Owner, key []byte, token uint64) Effect {
	st := t.keys[string(key)]
	if st == nil || st.token == 0 || st.token != token {
		t.counter.NotHolder++
		return Effect{Owner: owner, Status: wire.StatusNotHolder}
	}
	t.counter.Releases++
	t.timers.remove(&st.lease)
	t.handoffOrFree(now, st)
	return Effect{Owner: owner, Status: wire.StatusReleased}
}

// Cancel applies cancel(key, target) from owner.Conn at now (§5): when the
// connection's acquire target is queued on key, that waiter leaves the queue,
// its acquire is answered T through the Sink, and Cancel returns O; otherwise N.
func (t *Table) Cancel(now int64, owner Owner, key []byte, target uint32) Effect {
	w := t.waiters[Owner{Conn: owner.Conn, ReqID: target}]
	if w == nil || w.st.key != string(key) {
		t.counter.NotHolder++
		return Effect{Owner: owner, Status: wire.StatusNotHolder}
	}
	t.counter.Cancels++
	t.counter.Timeouts++
	t.sink.Deliver(Effect{Owner: w.owner, Status: wire.StatusTimeout})
	t.dropWaiter(w)
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
		t.dropWaiter(w)
		n++
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
		t.dropWaiter(w)
	}
	return len(ws)
}

// NextDeadline returns the earliest pending lease or wait deadline (ns), and
// false when none is armed.
func (t *Table) NextDeadline() (int64, bool) {
	if len(t.timers.items) == 0 {
		return 0, false
	}
	return t.timers.items[0].at, true
}

// Advance applies every lease expiry and wait timeout due at or before now,
// in deadline order, and returns how many it applied. Expired leases hand off
// to the queue head (a new token); timed-out waiters are answered T.
func (t *Table) Advance(now int64) int {
	n := 0
	for len(t.timers.items) > 0 && t.timers.items[0].at <= now {
		x := t.timers.items[0]
		if x.w != nil {
			t.timeoutWaiter(x.w)
		} else {
			t.expire(now, x.st())
		}
		n++
	}
	return n
}

// Expire ends the lease of key's holder at now if token is still the holder's
// (a stale expiry is ignored), handing off to the queue head. It reports
// whether anything changed. The cluster uses it to replicate an expiry the
// leader's timer decided.
func (t *Table) Expire(now int64, key []byte, token uint64) bool {
	st := t.keys[string(key)]
	if st == nil || st.token == 0 || st.token != token {
		return false
	}
	t.expire(now, st)
	return true
}

// WaitTimeout answers owner's queued acquire T and removes it (its wait
// elapsed). It reports whether the waiter was still queued.
func (t *Table) WaitTimeout(owner Owner) bool {
	w := t.waiters[owner]
	if w == nil {
		return false
	}
	t.timeoutWaiter(w)
	return true
}

func (t *Table) timeoutWaiter(w *waiter) {
	t.counter.Timeouts++
	t.sink.Deliver(Effect{Owner: w.owner, Status: wire.StatusTimeout})
	t.dropWaiter(w)
}

func (t *Table) expire(now int64, st *lockState) {
	t.counter.Expiries++
	t.timers.remove(&st.lease)
	t.handoffOrFree(now, st)
}

// handoffOrFree grants st to its first waiter whose wait has not elapsed
// (waiters whose wait elapsed are answered T: they are never granted), or
// frees it. The lease timer must already be disarmed.
func (t *Table) handoffOrFree(now int64, st *lockState) {
	for w := st.head; w != nil; w = st.head {
		if w.wait.at <= now {
			t.timeoutWaiter(w)
			continue
		}
		owner, leaseMS, enq := w.owner, w.leaseMS, w.enqueued
		t.dropWaiter(w)
		t.grant(now, st, owner.Conn, leaseMS)
		t.counter.Handoffs++
		t.sink.Deliver(Effect{
			Owner:  owner,
			Status: wire.StatusGranted,
			Token:  st.token,
			Queued: wire.QueuedUnits(time.Duration(now - enq)),
		})
		return
	}
	st.token = 0
	st.holder = 0
	t.deactivate(st)
}

func (t *Table) grant(now int64, st *lockState, conn uint64, leaseMS uint32) {
	st.token = t.tokens.Next()
	st.holder = conn
	st.grant = now
	st.lease.at = addNs(now, msToNs(leaseMS)+t.limits.LeaseSlack)
	t.arm(&st.lease)
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

// arm pushes x on the timer heap with the next arm sequence number.
func (t *Table) arm(x *timer) {
	t.seq++
	x.seq = t.seq
	t.timers.push(x)
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

// dropWaiter unlinks w from its key queue, its connection list, the owner
// index and the timer heap, and recycles it.
func (t *Table) dropWaiter(w *waiter) {
	st := w.st
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		st.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		st.tail = w.prev
	}
	st.depth--
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
	t.timers.remove(&w.wait)
	t.queued--
	t.counts.AddWaiters(-1)
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

func (t *Table) newState(key []byte) *lockState {
	st := t.freeStates
	if st != nil {
		t.freeStates = st.inext
		t.nFreeStates--
		st.inext = nil
	} else {
		st = &lockState{}
	}
	st.key = string(key)
	t.keys[st.key] = st
	return st
}

func (t *Table) activate() {
	t.active++
	t.counts.AddKeys(1)
}

// deactivate moves a free key with no waiters to the idle cache, evicting the
// oldest idle key beyond the cache size.
func (t *Table) deactivate(st *lockState) {
	t.active--
	t.counts.AddKeys(-1)
	t.idle.pushBack(st)
	for t.idle.n > t.limits.IdleCache {
		old := t.idle.front()
		t.idle.remove(old)
		delete(t.keys, old.key)
		if t.nFreeStates < t.limits.IdleCache {
			*old = lockState{inext: t.freeStates}
			t.freeStates = old
			t.nFreeStates++
		} else {
			*old = lockState{} // left to the GC
		}
	}
}

// stateList is an intrusive doubly linked list of idle lockStates.
type stateList struct {
	head, tail *lockState
	n          int
}

func (l *stateList) pushBack(st *lockState) {
	st.iprev, st.inext = l.tail, nil
	if l.tail != nil {
		l.tail.inext = st
	} else {
		l.head = st
	}
	l.tail = st
	st.inIdle = true
	l.n++
}

func (l *stateList) front() *lockState { return l.head }

func (l *stateList) remove(st *lockState) {
	if !st.inIdle {
		return
	}
	if st.iprev != nil {
		st.iprev.inext = st.inext
	} else {
		l.head = st.inext
	}
	if st.inext != nil {
		st.inext.iprev = st.iprev
	} else {
		l.tail = st.iprev
	}
	st.iprev, st.inext, st.inIdle = nil, nil, false
	l.n--
}
