package locktable

// The table's one timer structure (issue #29 item 6): Table.timers, an
// indexed binary min-heap of every armed deadline, leases and waits alike, so
// a release or a cancel removes its timer in O(log n) instead of leaving
// garbage behind. An item is a held entry's number (its lease; entry.hpos is
// 1 + the item's position) or waitBit | a wait number (a waiter's wait
// deadline: Table.waitRefs names its timer, timer.pos is 1 + the position).
//
// Order: (deadline, order word, arm sequence), the order word being a
// lease's token or a wait's after (the token of the last lease armed before
// it), the arm sequence 0 for a lease and ≥ 1 for a wait. So leases with equal
// deadlines fire in token order (arm order), waits in arm order (after never
// decreases as waits are armed), and a lease and a wait with equal deadlines
// in the order they were armed. The heap holds no randomness: the same
// operations give the same order.

// timer is one armed wait deadline of a waiter.
type timer struct {
	at  int64  // deadline, ns
	seq uint64 // arm order (≥ 1): equal deadlines fire in the order they were armed
	pos uint32 // 1 + position in Table.timers; 0 when not armed
	num uint32 // wait number (Table.waitRefs) while armed
	w   *waiter
}

const waitBit = 1 << 31 // timer item: a wait number, not an entry number

// key returns the order of timer item x.
func (t *Table) key(x uint32) (at int64, ord, seq uint64) {
	if x&waitBit == 0 {
		e := t.ent(x)
		return e.lease, e.token, 0
	}
	w := t.waitRefs[x&^waitBit]
	return w.at, w.w.after, w.seq
}

func (t *Table) lessTimer(i, j int) bool {
	a, ao, as := t.key(t.timers[i])
	b, bo, bs := t.key(t.timers[j])
	return a < b || (a == b && (ao < bo || (ao == bo && as < bs)))
}

// setPos records that item x sits at position p.
func (t *Table) setPos(p int, x uint32) {
	if x&waitBit == 0 {
		t.ent(x).hpos = uint32(p) + 1
	} else {
		t.waitRefs[x&^waitBit].pos = uint32(p) + 1
	}
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

// removeTimer takes the item at position p out of the heap.
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

// pushLease arms held entry i's lease (entry.lease).
func (t *Table) pushLease(i uint32) { t.pushTimer(i) }

// removeLease disarms entry i's lease, if armed.
func (t *Table) removeLease(i uint32) {
	e := t.ent(i)
	if e.hpos == 0 {
		return
	}
	t.removeTimer(int(e.hpos - 1))
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
	t.pushTimer(waitBit | x.num)
}

// disarm removes wait timer x from the heap, if armed.
func (t *Table) disarm(x *timer) {
	if x.pos == 0 {
		return
	}
	t.removeTimer(int(x.pos - 1))
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
