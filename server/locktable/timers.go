package locktable

import "unsafe"

// timer is one armed deadline: a waiter's wait (w set) or a holder's lease
// (w nil: the timer is the lease field of its lockState, found by st()).
// Leaving out a back pointer to the lockState keeps a held lock at 112 bytes
// of state, the 112-byte size class instead of 128 (issue #21).
type timer struct {
	at  int64  // deadline, ns
	seq uint64 // arm order: equal deadlines fire in the order they were armed
	idx int    // position in the heap; -1 when not armed
	w   *waiter
}

// leaseOffset is the offset of the lease timer inside a lockState.
const leaseOffset = unsafe.Offsetof(lockState{}.lease)

// st returns the lockState whose lease x is. x must be a lease timer (w nil):
// every lease timer is the lease field of a lockState, so stepping back by
// the field's offset stays inside that one allocation (unsafe.Pointer rule 3;
// checkptr under -race verifies it).
func (x *timer) st() *lockState {
	return (*lockState)(unsafe.Add(unsafe.Pointer(x), -int(leaseOffset)))
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
