package locktable

import "fmt"

// CheckInvariants verifies the table's internal consistency and returns the
// first violation found, or nil. It walks every structure (O(keys + waiters +
// timers)), so it is meant for tests, fuzzing and debug builds, not the hot path.
//
// It checks: a key is held (token > 0, lease armed, not idle) or idle (token 0,
// no waiters, in the idle list); queues are well linked, FIFO by arrival, and
// only behind a holder; every waiter is indexed by owner and by connection and
// has its wait armed; the timer heap holds exactly the leases and waits, in
// heap order, with correct back indexes; held tokens are distinct; the
// counters ActiveKeys and Waiters match; the idle cache and free lists are
// within their bound.
func (t *Table) CheckInvariants() error {
	held, waiters := 0, 0
	tokens := make(map[uint64]string)
	for k, st := range t.keys {
		if st.key != k {
			return fmt.Errorf("key %q: entry names key %q", k, st.key)
		}
		if st.token == 0 {
			if !st.inIdle {
				return fmt.Errorf("key %q: free but not in the idle list", k)
			}
			if st.head != nil || st.tail != nil || st.depth != 0 {
				return fmt.Errorf("key %q: free with a queue (depth %d)", k, st.depth)
			}
			if t.armed(&st.lease) {
				return fmt.Errorf("key %q: free with its lease armed", k)
			}
			continue
		}
		held++
		if st.inIdle {
			return fmt.Errorf("key %q: held but in the idle list", k)
		}
		if other, dup := tokens[st.token]; dup {
			return fmt.Errorf("keys %q and %q hold the same token %d", other, k, st.token)
		}
		tokens[st.token] = k
		if !t.armed(&st.lease) || st.lease.w != nil || st.lease.st() != st {
			return fmt.Errorf("key %q: held without its lease armed", k)
		}
		n := 0
		var prev *waiter
		for w := st.head; w != nil; w = w.next {
			n++
			if w.prev != prev {
				return fmt.Errorf("key %q: waiter %d has a bad prev link", k, n)
			}
			if w.st != st {
				return fmt.Errorf("key %q: waiter %d points at key %q", k, n, w.st.key)
			}
			if t.waiters[w.owner] != w {
				return fmt.Errorf("key %q: waiter %v not indexed by owner", k, w.owner)
			}
			if !t.armed(&w.wait) || w.wait.w != w {
				return fmt.Errorf("key %q: waiter %v without its wait armed", k, w.owner)
			}
			if prev != nil && prev.wait.seq >= w.wait.seq {
				return fmt.Errorf("key %q: queue not in arrival order at waiter %v", k, w.owner)
			}
			prev = w
		}
		if st.tail != prev {
			return fmt.Errorf("key %q: bad tail", k)
		}
		if n != int(st.depth) {
			return fmt.Errorf("key %q: depth %d, queue has %d", k, st.depth, n)
		}
		waiters += n
	}
	if held != t.active {
		return fmt.Errorf("active = %d, held keys = %d", t.active, held)
	}
	if waiters != t.queued || waiters != len(t.waiters) {
		return fmt.Errorf("queued = %d, owner index = %d, waiters in queues = %d", t.queued, len(t.waiters), waiters)
	}
	// idle list
	idle := 0
	var iprev *lockState
	for st := t.idle.head; st != nil; st = st.inext {
		idle++
		if st.iprev != iprev || !st.inIdle || st.token != 0 || t.keys[st.key] != st {
			return fmt.Errorf("idle list: bad entry %q", st.key)
		}
		iprev = st
	}
	if t.idle.tail != iprev || idle != t.idle.n {
		return fmt.Errorf("idle list: n = %d, walked %d", t.idle.n, idle)
	}
	if idle > t.limits.IdleCache {
		return fmt.Errorf("idle list: %d entries > IdleCache %d", idle, t.limits.IdleCache)
	}
	if len(t.keys) != held+idle {
		return fmt.Errorf("%d key entries, %d held + %d idle", len(t.keys), held, idle)
	}
	// per-connection lists
	byConn := 0
	for c, h := range t.byConn {
		if h == nil || h.cprev != nil {
			return fmt.Errorf("conn %d: bad list head", c)
		}
		for w := h; w != nil; w = w.cnext {
			byConn++
			if w.owner.Conn != c || t.waiters[w.owner] != w {
				return fmt.Errorf("conn %d: list holds foreign or unindexed waiter %v", c, w.owner)
			}
			if w.cnext != nil && w.cnext.cprev != w {
				return fmt.Errorf("conn %d: bad cprev link after %v", c, w.owner)
			}
		}
	}
	if byConn != len(t.waiters) {
		return fmt.Errorf("per-connection lists hold %d waiters, owner index %d", byConn, len(t.waiters))
	}
	// timer heap
	h := t.timers.items
	if len(h) != held+waiters {
		return fmt.Errorf("%d timers armed, want %d leases + %d waits", len(h), held, waiters)
	}
	for i, x := range h {
		if x.idx != i {
			return fmt.Errorf("timer %d has idx %d", i, x.idx)
		}
		if x.w != nil && &x.w.wait != x {
			return fmt.Errorf("timer %d is neither a lease nor a wait", i)
		}
		if i > 0 && t.timers.less(i, (i-1)/2) {
			return fmt.Errorf("timer heap order broken at %d", i)
		}
	}
	if t.nFreeStates > t.limits.IdleCache || t.nFreeWaiters > t.limits.IdleCache {
		return fmt.Errorf("free lists hold %d states, %d waiters > %d", t.nFreeStates, t.nFreeWaiters, t.limits.IdleCache)
	}
	return nil
}

// armed reports whether x is in the timer heap.
func (t *Table) armed(x *timer) bool {
	return x.idx >= 0 && x.idx < len(t.timers.items) && t.timers.items[x.idx] == x
}
