package locktable

// timer is one armed wait deadline of a waiter (leases are in Table.leases,
// a heap of entry numbers).
type timer struct {
	at  int64  // deadline, ns
	seq uint64 // arm order: equal deadlines fire in the order they were armed
	idx int    // position in the heap; -1 when not armed
	w   *waiter
}

// timerHeap is an indexed binary min-heap of deadlines, so a release or a
// cancel removes its timer in O(log n) instead of leaving garbage behind.
// The heap holds no randomness: the same operations give the same order.
type timerHeap struct {
	items []*timer
}

func (h *timerHeap) less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	return a.at < b.at || (a.at == b.at && a.seq < b.seq)
}

func (h *timerHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].idx = i
	h.items[j].idx = j
}

func (h *timerHeap) push(x *timer) {
	x.idx = len(h.items)
	h.items = append(h.items, x)
	h.up(x.idx)
}

func (h *timerHeap) remove(x *timer) {
	i := x.idx
	if i < 0 || i >= len(h.items) || h.items[i] != x {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	x.idx = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	if c := cap(h.items); c > 1024 && len(h.items) < c/4 { // memory falls back after a burst
		h.items = append(make([]*timer, 0, c/2), h.items...)
	}
}

func (h *timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *timerHeap) down(i0 int) bool {
	i := i0
	n := len(h.items)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// The lease heap: an indexed binary min-heap of entry numbers by (lease
// deadline, arm order); entry.hpos is 1 + the position.

func (t *Table) lessLease(i, j int) bool {
	a, b := t.ent(t.leases[i]), t.ent(t.leases[j])
	return a.lease < b.lease || (a.lease == b.lease && a.token < b.token)
}

func (t *Table) swapLease(i, j int) {
	h := t.leases
	h[i], h[j] = h[j], h[i]
	t.ent(h[i]).hpos = uint32(i) + 1
	t.ent(h[j]).hpos = uint32(j) + 1
}

func (t *Table) pushLease(i uint32) {
	t.leases = append(t.leases, i)
	j := len(t.leases) - 1
	t.ent(i).hpos = uint32(j) + 1
	t.upLease(j)
}

func (t *Table) removeLease(i uint32) {
	e := t.ent(i)
	if e.hpos == 0 {
		return
	}
	p := int(e.hpos - 1)
	last := len(t.leases) - 1
	if p != last {
		t.swapLease(p, last)
	}
	t.leases = t.leases[:last]
	e.hpos = 0
	if p != last && !t.downLease(p) {
		t.upLease(p)
	}
	if c := cap(t.leases); c > 1024 && len(t.leases) < c/4 { // memory falls back after a burst
		t.leases = append(make([]uint32, 0, c/2), t.leases...)
	}
}

func (t *Table) upLease(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !t.lessLease(j, i) {
			break
		}
		t.swapLease(i, j)
		j = i
	}
}

func (t *Table) downLease(i0 int) bool {
	i := i0
	n := len(t.leases)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && t.lessLease(r, l) {
			j = r
		}
		if !t.lessLease(j, i) {
			break
		}
		t.swapLease(i, j)
		i = j
	}
	return i > i0
}
