package locktable

import "math"

// The table's timers (issue #29 item 6, issue #35): every armed deadline,
// leases and waits alike. An item is a held entry's number (its lease;
// entry.hpos is its place) or waitBit | a wait number (a waiter's wait
// deadline: Table.waitRefs names its timer, timer.pos is its place).
//
// Order: (deadline, order word, arm sequence), the order word being a
// lease's token or a wait's after (the token of the last lease armed before
// it), the arm sequence 0 for a lease and ≥ 1 for a wait. So leases with equal
// deadlines fire in token order (arm order), waits in arm order (after never
// decreases as waits are armed), and a lease and a wait with equal deadlines
// in the order they were armed. Nothing here holds randomness: the same
// operations give the same order.
//
// Lanes (issue #35): most deadlines are armed as "now + the same duration"
// (every client uses one lease and one wait), so in arm order they are
// already sorted. A lane is a FIFO of items of one duration (deadline minus
// grant or enqueue instant), sorted by the order above: arming appends (O(1)),
// disarming marks the item's place with a tombstone (O(1)), the earliest is
// the lane's head. An item whose deadline would break its lane's order (the
// clock went back, a restored snapshot, a duration with no free lane) goes
// into the indexed binary min-heap, as every item did before. The earliest
// timer is the least of the heap's top and the lanes' heads (at most
// 1 + nLanes candidates). A place word is 0 when not armed, else
// lane<<laneShift | (1 + index), lane 0 being the heap (index = heap
// position) and 1..nLanes the lanes (index into lane.items). A lane costs 4
// bytes per armed item plus its tombstones, at most as many as its live
// items plus laneSlack before it is compacted, so memory follows the armed
// count. This replaces the heap's O(log n) sift on every release (≈ 13 % of
// the server's CPU in the pipelined row) with a store.

// timer is one armed wait deadline of a waiter.
type timer struct {
	at  int64  // deadline, ns
	seq uint64 // arm order (≥ 1): equal deadlines fire in the order they were armed
	pos uint32 // place (lane and index, see above); 0 when not armed
	num uint32 // wait number (Table.waitRefs) while armed
	w   *waiter
}

const (
	waitBit   = 1 << 31 // timer item: a wait number, not an entry number
	nLanes    = 7       // lanes 1..7; lane 0 is the heap
	laneShift = 29      // place: lane in the top 3 bits, 1 + index below
	placeMask = 1<<laneShift - 1
	tombItem  = ^uint32(0) // a disarmed item's place in a lane (no entry or wait number reaches it)
	laneSlack = 256        // tombstones a lane may hold beyond its live items before it is compacted
)

// lane is one FIFO of items armed with one duration, in timer order.
type lane struct {
	dur   int64    // deadline − arm instant of its items, ns
	items []uint32 // items[head:]: armed items in timer order, tombItem where disarmed
	head  int      // first live item (when live > 0)
	live  int      // armed items
	// order key of the last item appended: a new item goes after it
	lastAt  int64
	lastOrd uint64
	lastSeq uint64
}

// key returns the order of timer item x.
func (t *Table) key(x uint32) (at int64, ord, seq uint64) {
	if x&waitBit == 0 {
		e := t.ent(x)
		return e.lease, e.token, 0
	}
	w := t.waitRefs[x&^waitBit]
	return w.at, w.w.after, w.seq
}

func keyLess(a int64, ao, as uint64, b int64, bo, bs uint64) bool {
	return a < b || (a == b && (ao < bo || (ao == bo && as < bs)))
}

func (t *Table) lessItem(x, y uint32) bool {
	a, ao, as := t.key(x)
	b, bo, bs := t.key(y)
	return keyLess(a, ao, as, b, bo, bs)
}

func (t *Table) lessTimer(i, j int) bool { return t.lessItem(t.timers[i], t.timers[j]) }

// setPlace records item x's place word.
func (t *Table) setPlace(x, pl uint32) {
	if x&waitBit == 0 {
		t.ent(x).hpos = pl
	} else {
		t.waitRefs[x&^waitBit].pos = pl
	}
}

// setPos records that item x sits at heap position p.
func (t *Table) setPos(p int, x uint32) { t.setPlace(x, uint32(p)+1) }

// renumberItem rewrites the item at place pl (entry moveEntry moved).
func (t *Table) renumberItem(pl, to uint32) {
	if l := pl >> laneShift; l == 0 {
		t.timers[pl-1] = to
	} else {
		t.lanes[l-1].items[pl&placeMask-1] = to
	}
}

// armItem arms item x (its deadline already set), dur being its deadline
// minus its arm instant (which lane it belongs to).
func (t *Table) armItem(x uint32, dur int64) {
	at, ord, seq := t.key(x)
	t.lowArm = min(t.lowArm, at)
	free := -1
	for l := range t.lanes {
		ln := &t.lanes[l]
		if ln.live == 0 {
			if free < 0 {
				free = l
			}
			continue
		}
		if ln.dur != dur {
			continue
		}
		if keyLess(at, ord, seq, ln.lastAt, ln.lastOrd, ln.lastSeq) || len(ln.items) >= placeMask {
			continue // out of order for this lane: another one, or the heap
		}
		t.appendLane(l, x, at, ord, seq)
		return
	}
	if free >= 0 && !t.noLanes {
		ln := &t.lanes[free]
		ln.dur = dur
		t.appendLane(free, x, at, ord, seq)
		return
	}
	t.pushTimer(x)
}

func (t *Table) appendLane(l int, x uint32, at int64, ord, seq uint64) {
	ln := &t.lanes[l]
	if len(ln.items) == cap(ln.items) && ln.head > 0 && ln.head >= len(ln.items)/2 {
		t.compactLane(l) // reuse the space before the head instead of growing
	}
	ln.items = append(ln.items, x)
	ln.live++
	ln.lastAt, ln.lastOrd, ln.lastSeq = at, ord, seq
	t.setPlace(x, uint32(l+1)<<laneShift|uint32(len(ln.items)))
}

// compactLane drops lane l's tombstones, moving its live items to the front.
func (t *Table) compactLane(l int) {
	ln := &t.lanes[l]
	n := 0
	for _, x := range ln.items[ln.head:] {
		if x == tombItem {
			continue
		}
		ln.items[n] = x
		n++
		t.setPlace(x, uint32(l+1)<<laneShift|uint32(n))
	}
	ln.items, ln.head = ln.items[:n], 0
	if c := cap(ln.items); c > 1024 && n < c/4 { // memory falls back after a burst
		ln.items = append(make([]uint32, 0, c/2), ln.items...)
		for k, x := range ln.items {
			t.setPlace(x, uint32(l+1)<<laneShift|uint32(k+1))
		}
	}
}

// disarmItem disarms the item at place pl (not 0).
func (t *Table) disarmItem(pl uint32) {
	l := pl >> laneShift
	if l == 0 {
		t.removeTimer(int(pl - 1))
		return
	}
	ln := &t.lanes[l-1]
	k := int(pl&placeMask) - 1
	ln.items[k] = tombItem
	ln.live--
	switch {
	case ln.live == 0:
		if cap(ln.items) > 1024 {
			ln.items = nil // memory falls back after a burst
		}
		ln.items, ln.head = ln.items[:0], 0
	case k == ln.head:
		for ln.items[ln.head] == tombItem {
			ln.head++
		}
	case len(ln.items)-ln.head > 2*ln.live+laneSlack:
		t.compactLane(int(l - 1))
	}
}

// EarliestArmed returns the earliest deadline armed since its last call
// (math.MaxInt64: none; math.MinInt64 after ShiftLeases, and before the first
// call) and starts over. A caller sleeping until a NextDeadline it read needs
// to read it again only when this is earlier: disarming never moves the
// earliest deadline forward (issue 35: NextDeadline after every command was
// 2 % of the pipelined row).
func (t *Table) EarliestArmed() int64 {
	d := t.lowArm
	t.lowArm = math.MaxInt64
	return d
}

// first returns the earliest armed item, ok false when none is armed.
func (t *Table) first() (x uint32, ok bool) {
	if len(t.timers) > 0 {
		x, ok = t.timers[0], true
	}
	for l := range t.lanes {
		ln := &t.lanes[l]
		if ln.live == 0 {
			continue
		}
		if y := ln.items[ln.head]; !ok || t.lessItem(y, x) {
			x, ok = y, true
		}
	}
	return x, ok
}

// allToHeap moves every lane's items into the heap and leaves the lanes
// empty (ShiftLeases: the deadlines move, their order within a lane may not
// hold).
func (t *Table) allToHeap() {
	for l := range t.lanes {
		ln := &t.lanes[l]
		for _, x := range ln.items[ln.head:] {
			if x != tombItem {
				t.timers = append(t.timers, x)
				t.setPos(len(t.timers)-1, x)
			}
		}
		ln.items, ln.head, ln.live = nil, 0, 0
	}
}

// armedCount is the number of armed items.
func (t *Table) armedCount() int {
	n := len(t.timers)
	for l := range t.lanes {
		n += t.lanes[l].live
	}
	return n
}

func (t *Table) swapTimers(i, j int) {
	h := t.timers
	h[i], h[j] = h[j], h[i]
	t.setPos(i, h[i])
	t.setPos(j, h[j])
}

func (t *Table) pushTimer(x uint32) {
	t.timers = append(t.timers, x)
	j := len(t.timers) - 1
	t.setPos(j, x)
	t.upTimer(j)
}

// removeTimer takes the item at heap position p out of the heap.
func (t *Table) removeTimer(p int) {
	last := len(t.timers) - 1
	if p != last {
		t.swapTimers(p, last)
	}
	t.timers = t.timers[:last]
	if p != last && !t.downTimer(p) {
		t.upTimer(p)
	}
	if c := cap(t.timers); c > 1024 && len(t.timers) < c/4 { // memory falls back after a burst
		t.timers = append(make([]uint32, 0, c/2), t.timers...)
	}
}

func (t *Table) upTimer(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !t.lessTimer(j, i) {
			break
		}
		t.swapTimers(i, j)
		j = i
	}
}

func (t *Table) downTimer(i0 int) bool {
	i := i0
	n := len(t.timers)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && t.lessTimer(r, l) {
			j = r
		}
		if !t.lessTimer(j, i) {
			break
		}
		t.swapTimers(i, j)
		i = j
	}
	return i > i0
}

// reheap restores the heap order after deadlines moved (ShiftLeases).
func (t *Table) reheap() {
	for p := len(t.timers)/2 - 1; p >= 0; p-- {
		t.downTimer(p)
	}
}

// pushLease arms held entry i's lease (entry.lease; entry.grant its arm instant).
func (t *Table) pushLease(i uint32) {
	e := t.ent(i)
	t.armItem(i, e.lease-e.grant)
}

// removeLease disarms entry i's lease, if armed.
func (t *Table) removeLease(i uint32) {
	e := t.ent(i)
	if e.hpos == 0 {
		return
	}
	t.disarmItem(e.hpos)
	e.hpos = 0
}

// arm arms wait timer x (x.at set) with the next arm sequence number.
func (t *Table) arm(x *timer) {
	t.seq++
	x.seq = t.seq
	if n := len(t.freeWaitNums); n > 0 {
		x.num = t.freeWaitNums[n-1]
		t.freeWaitNums = t.freeWaitNums[:n-1]
		t.waitRefs[x.num] = x
	} else {
		x.num = uint32(len(t.waitRefs))
		t.waitRefs = append(t.waitRefs, x)
	}
	dur := x.at
	if x.w != nil {
		dur -= x.w.enqueued
	}
	t.armItem(waitBit|x.num, dur)
}

// disarm disarms wait timer x, if armed.
func (t *Table) disarm(x *timer) {
	if x.pos == 0 {
		return
	}
	t.disarmItem(x.pos)
	x.pos = 0
	t.waitRefs[x.num] = nil
	if len(t.freeWaitNums)+1 == len(t.waitRefs) { // no wait armed: start over (memory falls back after a burst)
		if cap(t.waitRefs) > 1024 {
			t.waitRefs, t.freeWaitNums = nil, nil
		}
		t.waitRefs, t.freeWaitNums = t.waitRefs[:0], t.freeWaitNums[:0]
		return
	}
	t.freeWaitNums = append(t.freeWaitNums, x.num)
}
