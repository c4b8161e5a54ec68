package locktable

import (
	"fmt"
	"slices"
)

// CheckInvariants verifies the table's internal consistency and returns the
// first violation found, or nil. It walks every structure (O(keys + waiters +
// timers)). It lives in a _test.go file so that it is compiled only into the
// package's tests and fuzz targets and never ships in a binary (issue 36 item 9).
//
// It checks: every entry is found by its key through the index, and the index
// holds exactly the entries (hash bytes right, no slot cut off from its home
// by an empty one, load ≤ 0.8); the pages are the entries' plus at most one
// spare; a key is held (token > 0, lease armed, not idle) or idle (token 0,
// no waiters, in the idle list); queues are well linked, FIFO by arrival, and
// only behind a holder; every waiter is indexed by owner and by connection and
// has its wait armed; the lease and wait heaps hold exactly the leases and
// waits, in heap order, with correct back indexes; held tokens are distinct;
// the counters ActiveKeys and Waiters match; the idle cache and free lists
// are within their bound.
func (t *Table) CheckInvariants() error {
	held, waiters, blocked := 0, 0, 0
	tokens := make(map[uint64]string)
	if want := (int(t.n) + pageSize - 1) / pageSize; len(t.pages) < want || len(t.pages) > want+1 {
		return fmt.Errorf("%d entries in %d pages", t.n, len(t.pages))
	}
	inIdle := make(map[uint32]bool)
	var iprev uint32 = noEntry
	for i := t.idle.head; i != noEntry; i = idleNext(t.ent(i)) {
		if i >= t.n || inIdle[i] || idlePrev(t.ent(i)) != iprev || t.ent(i).token != 0 {
			return fmt.Errorf("idle list: bad entry %d", i)
		}
		inIdle[i] = true
		iprev = i
	}
	if t.idle.tail != iprev || len(inIdle) != t.idle.n {
		return fmt.Errorf("idle list: n = %d, walked %d", t.idle.n, len(inIdle))
	}
	if t.idle.n > t.limits.IdleCache {
		return fmt.Errorf("idle list: %d entries > IdleCache %d", t.idle.n, t.limits.IdleCache)
	}
	long := 0
	refs := make(map[uint32]uint32)
	for i := range t.n {
		e := t.ent(i)
		k := t.keyString(i)
		if e.long() {
			long++
			if fitsInline([]byte(k)) || e.key != [inlineKey]byte{} {
				return fmt.Errorf("entry %d: key %q kept long", i, k)
			}
		} else if !fitsInline(e.inline()) || string(e.key[len(e.inline()):]) != string(make([]byte, inlineKey-len(e.inline()))) {
			return fmt.Errorf("entry %d: bad inline key %q", i, e.key)
		}
		if e.token == blockedTok {
			if e.holder != 0 || e.hpos != 0 || e.grant != 0 {
				return fmt.Errorf("key %q: blocked with a holder or a lease", k)
			}
		} else if e.token != 0 {
			if e.holder == 0 || int(e.holder) > len(t.conns) {
				return fmt.Errorf("key %q: bad holder reference %d", k, e.holder)
			}
			refs[e.holder]++
		} else if e.holder != 0 {
			return fmt.Errorf("key %q: free with a holder", k)
		}
		if j := t.findString(k); j != i {
			return fmt.Errorf("key %q: entry %d, index finds %d", k, i, j)
		}
		q := t.queues[i]
		if e.token == 0 {
			if !inIdle[i] {
				return fmt.Errorf("key %q: free but not in the idle list", k)
			}
			if q != nil {
				return fmt.Errorf("key %q: free with a queue", k)
			}
			if e.hpos != 0 {
				return fmt.Errorf("key %q: free with its lease armed", k)
			}
			continue
		}
		if inIdle[i] {
			return fmt.Errorf("key %q: active but in the idle list", k)
		}
		if e.token == blockedTok {
			blocked++
			if q == nil || q.head == nil || q.head.set == nil {
				return fmt.Errorf("key %q: blocked without a waiting key set at its head", k)
			}
		} else {
			held++
			hs := t.sets.get(e.token)
			if other, dup := tokens[e.token]; dup && hs == nil {
				return fmt.Errorf("keys %q and %q hold the same token %d", other, k, e.token)
			}
			if hs != nil && !slices.Contains(hs.ents[:hs.n], i) {
				return fmt.Errorf("key %q holds the token of a set without it", k)
			}
			tokens[e.token] = k
			if e.hpos == 0 || t.itemAt(e.hpos) != i {
				return fmt.Errorf("key %q: held without its lease armed", k)
			}
		}
		if q == nil {
			continue
		}
		if q.e != i {
			return fmt.Errorf("key %q: queue names entry %d", k, q.e)
		}
		n := 0
		var prev *waiter
		for w := q.head; w != nil; w = w.next {
			n++
			if w.prev != prev {
				return fmt.Errorf("key %q: waiter %d has a bad prev link", k, n)
			}
			if w.q != q {
				return fmt.Errorf("key %q: waiter %d points at another queue", k, n)
			}
			x := w // the indexed waiter of w's request
			if w.set != nil {
				x = w.set.m[0]
				if !slices.Contains(w.set.m[:w.set.n], w) || w.owner != x.owner || w.wait.at != x.wait.at {
					return fmt.Errorf("key %q: set member %v not in its set", k, w.owner)
				}
			}
			if t.waiters[w.owner] != x {
				return fmt.Errorf("key %q: waiter %v not indexed by owner", k, w.owner)
			}
			if !t.armed(&x.wait) || x.wait.w != x {
				return fmt.Errorf("key %q: waiter %v without its wait armed", k, w.owner)
			}
			if prev != nil && seqOf(prev) >= seqOf(w) {
				return fmt.Errorf("key %q: queue not in arrival order at waiter %v", k, w.owner)
			}
			prev = w
			if x == w {
				waiters++
			}
		}
		if q.tail != prev {
			return fmt.Errorf("key %q: bad tail", k)
		}
		if n == 0 || n != int(q.depth) {
			return fmt.Errorf("key %q: depth %d, queue has %d", k, q.depth, n)
		}
	}
	if long != len(t.long) {
		return fmt.Errorf("%d long keys, %d in the long-key map", long, len(t.long))
	}
	// holders' connections: counted references, indexed, free places free
	free := make(map[uint32]bool)
	for _, r := range t.freeRefs {
		if r == 0 || int(r) > len(t.conns) || free[r] || t.conns[r-1] != (connRef{}) {
			return fmt.Errorf("connection reference %d: bad free place", r)
		}
		free[r] = true
	}
	zero := 0
	for r := uint32(1); int(r) <= len(t.conns); r++ {
		c := t.conns[r-1]
		if !free[r] && c.refs == 0 {
			zero++
		}
		switch {
		case free[r]:
			if refs[r] != 0 {
				return fmt.Errorf("connection reference %d: free but held", r)
			}
		case c.refs != refs[r] || t.connIx[c.conn] != r:
			return fmt.Errorf("connection reference %d (conn %d): %d references counted, %d held, index %d", r, c.conn, c.refs, refs[r], t.connIx[c.conn])
		}
	}
	if zero != t.zeroRefs || zero > max(minZeroRefs, len(t.conns)/4) {
		return fmt.Errorf("%d unused connection references kept, %d counted (bound %d)", zero, t.zeroRefs, max(minZeroRefs, len(t.conns)/4))
	}
	if len(t.connIx)+len(free) != len(t.conns) {
		return fmt.Errorf("%d connections indexed, %d free, %d places", len(t.connIx), len(free), len(t.conns))
	}
	for i, q := range t.queues {
		if i >= t.n || q.e != i || t.ent(i).token == 0 {
			return fmt.Errorf("queue of entry %d: not a held entry's", i)
		}
	}
	if held+blocked != t.active || blocked != t.blocked {
		return fmt.Errorf("active = %d, blocked = %d; held keys = %d, blocked keys = %d", t.active, t.blocked, held, blocked)
	}
	// key sets: every held set's keys hold its token; no waiting set is
	// left grantable (at the head of all its keys, all of them blocked)
	var setErr error
	nSets := 0
	t.sets.each(func(tok uint64, hs *heldSet) {
		nSets++
		if setErr != nil {
			return
		}
		if t.sets.get(tok) != hs {
			setErr = fmt.Errorf("held set %d: not found by its token", tok)
			return
		}
		if hs.n < 2 || hs.n > len(hs.ents) {
			setErr = fmt.Errorf("held set %d: %d keys", tok, hs.n)
			return
		}
		for k, i := range hs.ents[:hs.n] {
			if i >= t.n || t.ent(i).token != tok || slices.Contains(hs.ents[:k], i) {
				setErr = fmt.Errorf("held set %d: entry %d does not hold its token (or twice)", tok, i)
				return
			}
		}
	})
	if setErr != nil {
		return setErr
	}
	if nSets != t.sets.n {
		return fmt.Errorf("set index: %d held sets, counted %d", nSets, t.sets.n)
	}
	if t.nFreeSets > t.limits.IdleCache {
		return fmt.Errorf("free list holds %d held sets > %d", t.nFreeSets, t.limits.IdleCache)
	}
	for _, w := range t.waiters {
		if s := w.set; s != nil {
			ready := true
			for _, m := range s.m[:s.n] {
				if m.q == nil || m.q.head != m || t.ent(m.q.e).token != blockedTok {
					ready = false
				}
			}
			if ready {
				return fmt.Errorf("waiting set %v is grantable but waits", w.owner)
			}
		}
	}
	if waiters != t.queued || waiters != len(t.waiters) {
		return fmt.Errorf("queued = %d, owner index = %d, waiters in queues = %d", t.queued, len(t.waiters), waiters)
	}
	if int(t.n) != held+blocked+t.idle.n {
		return fmt.Errorf("%d key entries, %d held + %d blocked + %d idle", t.n, held, blocked, t.idle.n)
	}
	// the index: every slot names an entry with its hash byte, reachable
	// from its home slot without crossing an empty slot; during a migration
	// (incremental resize) every entry is in the new arrays, in the old ones
	// at or above the cursor, or in both below it, and is found by its key
	used, err := checkSlots(t, t.slots, t.tags, 0)
	if err != nil {
		return err
	}
	oldLive := 0
	if t.old != nil {
		if t.mig < 0 || t.mig >= len(t.old) {
			return fmt.Errorf("index: migration cursor %d of %d old slots", t.mig, len(t.old))
		}
		if oldLive, err = checkSlots(t, t.old, t.oldTags, t.mig); err != nil {
			return fmt.Errorf("old %w", err)
		}
	}
	if used+oldLive != int(t.n) || t.ixN != int(t.n) || (used > 0 && used*5 > len(t.slots)*4) {
		return fmt.Errorf("index: %d slots used of %d (+%d unmigrated), %d entries, ixN %d", used, len(t.slots), oldLive, t.n, t.ixN)
	}
	for i := range t.n {
		if got := t.findString(t.keyString(i)); got != i {
			return fmt.Errorf("index: entry %d found as %d", i, got)
		}
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
	leases, waits, err := t.checkTimers()
	if err != nil {
		return err
	}
	if leases != held || waits != waiters || len(t.waitRefs)-len(t.freeWaitNums) != waiters {
		return fmt.Errorf("%d leases armed for %d held keys, %d waits (%d wait numbers) for %d waiters",
			leases, held, waits, len(t.waitRefs)-len(t.freeWaitNums), waiters)
	}
	if t.nFreeQueues > t.limits.IdleCache || t.nFreeWaiters > t.limits.IdleCache {
		return fmt.Errorf("free lists hold %d queues, %d waiters > %d", t.nFreeQueues, t.nFreeWaiters, t.limits.IdleCache)
	}
	return nil
}

// checkTimers checks the heap and the lanes: each item's place word names
// it, the heap order, each lane's order, live count and tombstone bound. It
// returns the leases and waits armed.
func (t *Table) checkTimers() (leases, waits int, err error) {
	// the timers: every held key's lease and every queued waiter's wait,
	// once, in the heap or in a lane
	check := func(x, pl uint32) error {
		if x&waitBit == 0 {
			leases++
			if x >= t.n || t.ent(x).hpos != pl {
				return fmt.Errorf("timer %#x: entry %d has hpos %#x", pl, x, t.ent(min(x, t.n-1)).hpos)
			}
			return nil
		}
		waits++
		n := x &^ waitBit
		if int(n) >= len(t.waitRefs) || t.waitRefs[n] == nil {
			return fmt.Errorf("timer %#x: wait %d not armed", pl, n)
		}
		wt := t.waitRefs[n]
		if wt.pos != pl || wt.num != n || wt.w == nil || &wt.w.wait != wt || wt.seq == 0 {
			return fmt.Errorf("timer %#x: wait %d has pos %#x, num %d", pl, n, wt.pos, wt.num)
		}
		return nil
	}
	for p, x := range t.timers {
		if err := check(x, uint32(p)+1); err != nil {
			return 0, 0, err
		}
		if p > 0 && t.lessTimer(p, (p-1)/2) {
			return 0, 0, fmt.Errorf("timer heap order broken at %d", p)
		}
	}
	for l := range t.lanes {
		ln := &t.lanes[l]
		live, prev := 0, tombItem
		if ln.live > 0 && ln.items[ln.head] == tombItem {
			return 0, 0, fmt.Errorf("lane %d: head %d is a tombstone", l, ln.head)
		}
		for k, x := range ln.items[ln.head:] {
			if x == tombItem {
				continue
			}
			live++
			if err := check(x, uint32(l+1)<<laneShift|uint32(ln.head+k+1)); err != nil {
				return 0, 0, err
			}
			if prev != tombItem && t.lessItem(x, prev) {
				return 0, 0, fmt.Errorf("lane %d: order broken at %d", l, ln.head+k)
			}
			prev = x
		}
		if live != ln.live {
			return 0, 0, fmt.Errorf("lane %d: %d items armed, %d counted", l, live, ln.live)
		}
		if len(ln.items)-ln.head > 2*ln.live+laneSlack {
			return 0, 0, fmt.Errorf("lane %d: %d places for %d items", l, len(ln.items)-ln.head, ln.live)
		}
	}
	return leases, waits, nil
}

// armed reports whether x is in the wait heap.
func (t *Table) armed(x *timer) bool {
	return x.pos > 0 && t.itemAt(x.pos) == waitBit|x.num && t.waitRefs[x.num] == x
}

// itemAt returns the timer item at place pl, tombItem when there is none.
func (t *Table) itemAt(pl uint32) uint32 {
	l, k := pl>>laneShift, int(pl&placeMask)-1
	if l == 0 {
		if k < 0 || k >= len(t.timers) {
			return tombItem
		}
		return t.timers[k]
	}
	if ln := &t.lanes[l-1]; k >= ln.head && k < len(ln.items) {
		return ln.items[k]
	}
	return tombItem
}

// checkSlots checks one slot array of the index and returns how many of its
// slots at or above from name an entry (tombstones are not counted).
func checkSlots(t *Table, slots []uint32, tags []uint8, from int) (int, error) {
	used := 0
	for j, s := range slots {
		if s == 0 || s == tomb {
			continue
		}
		if j >= from {
			used++
		}
		i := s - 1
		if i >= t.n {
			return 0, fmt.Errorf("index slot %d names entry %d of %d", j, i, t.n)
		}
		h := t.hashOf(i)
		if tags[j] != tag(h) {
			return 0, fmt.Errorf("index slot %d: bad hash byte", j)
		}
		for p := home(h, len(slots)); p != j; p = (p + 1) % len(slots) {
			if slots[p] == 0 {
				return 0, fmt.Errorf("index slot %d: empty slot %d between it and its home", j, p)
			}
		}
	}
	return used, nil
}
