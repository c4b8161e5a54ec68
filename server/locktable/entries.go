package locktable

import (
	"bytes"
	"hash/maphash"
)

// The compact store of keys (issue #21: 64 bytes of entry per held lock
// instead of a 112-byte lock state, its key string, a map slot and a timer
// pointer).
//
// Every key the table knows (held, or idle in the cache) is one fixed-size
// entry, numbered densely 0..n-1 and kept in fixed-size pages: growing never
// copies, and the pages hold no pointers (the collector does not scan them).
// Removing an entry moves the last one into its place, so the entries stay
// dense and trailing pages are released when keys go away. An entry is found
// by key through an open-addressing index of entry numbers (linear probing,
// one stored hash byte per slot, backward-shift deletion: no tombstones), and
// lease deadlines are in a heap of entry numbers. Keys of 1 to inlineKey bytes
// with no zero byte (every valid key: §2.1 forbids control characters) live
// inside the entry, padded with zeros; others (longer ones, at most 250
// bytes) in a side map, the entry's first key byte 0. The holder's connection
// is a 32-bit reference into a table of the connections that hold locks.

const (
	pageBits  = 10
	pageSize  = 1 << pageBits // entries per page (64 KiB)
	inlineKey = 16            // bytes of key kept inside the entry
	noEntry   = ^uint32(0)
)

// entry is one key: 48 bytes (TestLockStateSize). Leases with equal
// deadlines fire in arm order, which is token order: a table arms each lease
// with the token its grant just drew, strictly above every earlier one.
type entry struct {
	token  uint64          // current holder's fencing token; 0 = free (the entry is in the idle list)
	grant  int64           // held: grant instant (ns); free: idle list links (idlePrev, idleNext)
	lease  int64           // lease deadline (ns), armed while held
	holder uint32          // held: 1 + the holder's connection's place in Table.conns; free: 0
	hpos   uint32          // the lease's place in the timers (timers.go); 0 = not armed
	key    [inlineKey]byte // the key, zero-padded; key[0] == 0: the key is in Table.long
}

func (e *entry) long() bool { return e.key[0] == 0 }

// inline returns the inline key of e (not long).
func (e *entry) inline() []byte {
	if n := bytes.IndexByte(e.key[:], 0); n >= 0 {
		return e.key[:n]
	}
	return e.key[:]
}

func fitsInline(key []byte) bool {
	return len(key) >= 1 && len(key) <= inlineKey && bytes.IndexByte(key, 0) < 0
}

func (t *Table) ent(i uint32) *entry { return &t.pages[i>>pageBits][i&(pageSize-1)] }

// keyString returns entry i's key (it allocates for an inline key).
func (t *Table) keyString(i uint32) string {
	e := t.ent(i)
	if !e.long() {
		return string(e.inline())
	}
	return t.long[i]
}

func keyEq[K string | []byte](t *Table, i uint32, key K) bool {
	e := t.ent(i)
	if !e.long() {
		// the inline key is its non-zero bytes: key must fill them exactly
		n := len(key)
		return n >= 1 && n <= inlineKey && string(e.key[:n]) == string(key) &&
			e.key[n-1] != 0 && (n == inlineKey || e.key[n] == 0)
	}
	return t.long[i] == string(key)
}

func (t *Table) hashOf(i uint32) uint64 {
	e := t.ent(i)
	if !e.long() {
		return maphash.Bytes(t.seed, e.inline())
	}
	return maphash.String(t.seed, t.long[i])
}

func (t *Table) findBytes(key []byte) uint32 {
	if t.ixN == 0 {
		return noEntry
	}
	return find(t, maphash.Bytes(t.seed, key), key)
}

func (t *Table) findString(key string) uint32 {
	if t.ixN == 0 {
		return noEntry
	}
	return find(t, maphash.String(t.seed, key), key)
}

func home(h uint64, n int) int { return int(uint64(uint32(h)) * uint64(n) >> 32) }
func tag(h uint64) uint8       { return uint8(h >> 56) }

func find[K string | []byte](t *Table, h uint64, key K) uint32 {
	n := len(t.slots)
	tg := tag(h)
	for j := home(h, n); ; {
		s := t.slots[j]
		if s == 0 {
			break
		}
		if t.tags[j] == tg && keyEq(t, s-1, key) {
			return s - 1
		}
		if j++; j == n {
			j = 0
		}
	}
	if t.old == nil {
		return noEntry
	}
	return findOld(t, h, key)
}

// The index grows (and shrinks) incrementally (issue #29 item 6): a resize
// allocates the new slot arrays and keeps the old ones, and every later
// insert or removal migrates the next ixStep old slots (in slot order) into
// the new arrays, so no single operation rehashes more than ixStep entries.
// While a migration runs, an entry is in the new arrays (it was inserted
// since, or its old slot lies below the migration cursor t.mig), in the old
// arrays (old slot at or above the cursor), or both (old slot below the
// cursor: the old arrays are never rewritten by the migration, so every old
// probe chain stays intact). Lookups try the new arrays first, then the old.
// Nothing is inserted into the old arrays; a removal marks its old slot with
// a tombstone (no backward shift there: it could carry an unmigrated entry
// below the cursor). A growth by 3/2 from load 0.8 with ixStep ≥ 4 migrates
// the whole old index before the new one reaches load 0.8.

const tomb = ^uint32(0) // an old slot whose entry was removed during a migration

func findOld[K string | []byte](t *Table, h uint64, key K) uint32 {
	n := len(t.old)
	tg := tag(h)
	for j := home(h, n); ; {
		s := t.old[j]
		if s == 0 {
			return noEntry
		}
		if s != tomb && t.oldTags[j] == tg && keyEq(t, s-1, key) {
			return s - 1
		}
		if j++; j == n {
			j = 0
		}
	}
}

// slotIn returns the slot of slots that holds entry i (hash h), or -1.
func slotIn(slots []uint32, i uint32, h uint64) int {
	n := len(slots)
	for j := home(h, n); ; {
		switch slots[j] {
		case i + 1:
			return j
		case 0:
			return -1
		}
		if j++; j == n {
			j = 0
		}
	}
}

func (t *Table) place(i uint32, h uint64) {
	n := len(t.slots)
	j := home(h, n)
	for t.slots[j] != 0 {
		if j++; j == n {
			j = 0
		}
	}
	t.slots[j] = i + 1
	t.tags[j] = tag(h)
	t.placed++
}

// resize starts moving the index to size slots: the current arrays become
// the old ones, migrated step by step (migrate). A migration still running
// is finished first.
func (t *Table) resize(size int) {
	if t.old != nil {
		t.migrate(len(t.old))
	}
	if t.ixN == 0 || len(t.slots) == 0 {
		t.slots, t.tags = make([]uint32, size), make([]uint8, size)
		return
	}
	t.old, t.oldTags = t.slots, t.tags
	t.slots, t.tags = make([]uint32, size), make([]uint8, size)
	t.mig = 0
}

// migrate moves the next k old slots' entries into the new arrays, and drops
// the old arrays once every slot has been migrated.
func (t *Table) migrate(k int) {
	end := min(t.mig+k, len(t.old))
	for ; t.mig < end; t.mig++ {
		if s := t.old[t.mig]; s != 0 && s != tomb {
			t.place(s-1, t.hashOf(s-1))
		}
	}
	if t.mig == len(t.old) {
		t.old, t.oldTags, t.mig = nil, nil, 0
	}
}

func (t *Table) ixSizes() (minSize, step int) {
	minSize, step = t.ixMin, t.ixStep
	if minSize == 0 {
		minSize = 16
	}
	if step == 0 {
		step = 32
	}
	return minSize, step
}

// newEntry adds key as a new free entry (not yet in the idle list) and
// returns its number. The key must not be in the table.
func (t *Table) newEntry(key []byte) uint32 {
	minSize, step := t.ixSizes()
	if t.old != nil {
		t.migrate(step)
	}
	if (t.ixN+1)*5 > len(t.slots)*4 { // load ≤ 0.8
		t.resize(max(minSize, len(t.slots)*3/2))
	}
	i := t.n
	if int(i>>pageBits) == len(t.pages) {
		t.pages = append(t.pages, new([pageSize]entry))
	}
	t.n++
	e := t.ent(i)
	if fitsInline(key) {
		copy(e.key[:], key)
	} else {
		if t.long == nil {
			t.long = make(map[uint32]string)
		}
		t.long[i] = string(key)
	}
	t.place(i, t.hashOf(i))
	t.ixN++
	return i
}

// unindex removes entry i (hash h) from the index: backward-shift deletion
// in the new arrays, a tombstone in the old ones.
func (t *Table) unindex(i uint32, h uint64) {
	if t.old != nil {
		if j := slotIn(t.old, i, h); j >= 0 {
			t.old[j] = tomb
		}
	}
	n := len(t.slots)
	hole := slotIn(t.slots, i, h)
	if hole < 0 {
		return // only in the old arrays
	}
	for j := hole + 1; ; j++ {
		if j == n {
			j = 0
		}
		s := t.slots[j]
		if s == 0 {
			break
		}
		k := home(t.hashOf(s-1), n)
		// move j into the hole unless its home lies cyclically in (hole, j]
		if (j-k+n)%n >= (j-hole+n)%n {
			t.slots[hole], t.tags[hole] = s, t.tags[j]
			hole = j
		}
	}
	t.slots[hole], t.tags[hole] = 0, 0
}

// renumber points entry from's index slots (hash h) at to.
func (t *Table) renumber(from, to uint32, h uint64) {
	if j := slotIn(t.slots, from, h); j >= 0 {
		t.slots[j] = to + 1
	}
	if t.old != nil {
		if j := slotIn(t.old, from, h); j >= 0 {
			t.old[j] = to + 1
		}
	}
}

// removeEntry deletes free entry i (already out of the idle list): the last
// entry moves into its place, trailing pages and an oversized index are
// released.
func (t *Table) removeEntry(i uint32) {
	minSize, step := t.ixSizes()
	if t.old != nil {
		t.migrate(step)
	}
	t.unindex(i, t.hashOf(i))
	t.ixN--
	if t.ent(i).long() {
		delete(t.long, i)
	}

	last := t.n - 1
	if i != last {
		t.moveEntry(last, i)
	}
	*t.ent(last) = entry{}
	t.n--
	if p := len(t.pages); p > 1 && int(t.n) <= (p-2)*pageSize { // keep one spare page
		t.pages[p-1] = nil
		t.pages = t.pages[:p-1]
	}
	if n := len(t.slots); t.old == nil && n > 4*minSize && t.ixN*5 < n { // load < 0.2: shrink to 0.5
		t.resize(max(minSize, t.ixN*2))
	}
}

// moveEntry moves entry from into the free place to, fixing every reference.
func (t *Table) moveEntry(from, to uint32) {
	e := t.ent(from)
	t.renumber(from, to, t.hashOf(from))
	if e.long() {
		t.long[to] = t.long[from]
		delete(t.long, from)
	}
	*t.ent(to) = *e
	d := t.ent(to)
	if d.hpos != 0 {
		t.renumberItem(d.hpos, to)
	}
	if t.sets.n > 0 && d.token != 0 && d.token != blockedTok {
		t.renumberSet(d.token, from, to) // a held set names its entries
	}
	if d.token == 0 { // idle: its neighbours now point at to
		t.idleRelink(idlePrev(d), idleNext(d), to, to)
	}
	if len(t.queues) > 0 {
		if q := t.queues[from]; q != nil {
			delete(t.queues, from)
			t.queues[to] = q
			q.e = to
		}
	}
}

// The idle list links of a free entry are in its grant word.

func idlePrev(e *entry) uint32 { return uint32(uint64(e.grant) >> 32) }
func idleNext(e *entry) uint32 { return uint32(e.grant) }
func setIdlePrev(e *entry, p uint32) {
	e.grant = int64(uint64(p)<<32 | uint64(e.grant)&0xffffffff)
}
func setIdleNext(e *entry, nx uint32) {
	e.grant = int64(uint64(e.grant)&^0xffffffff | uint64(nx))
}

// idleList is the list of free entries kept for reuse, oldest first.
type idleList struct {
	head, tail uint32
	n          int
}

// idlePush appends free entry i to the idle list.
func (t *Table) idlePush(i uint32) {
	e := t.ent(i)
	e.grant = int64(uint64(t.idle.tail)<<32 | uint64(noEntry))
	if t.idle.tail != noEntry {
		setIdleNext(t.ent(t.idle.tail), i)
	} else {
		t.idle.head = i
	}
	t.idle.tail = i
	t.idle.n++
}

// idleRelink points the idle-list neighbours of one entry elsewhere: p's
// next link (or the head when p is noEntry) becomes next, and nx's previous
// link (or the tail when nx is noEntry) becomes prev.
func (t *Table) idleRelink(p, nx, next, prev uint32) {
	if p != noEntry {
		setIdleNext(t.ent(p), next)
	} else {
		t.idle.head = next
	}
	if nx != noEntry {
		setIdlePrev(t.ent(nx), prev)
	} else {
		t.idle.tail = prev
	}
}

// idleRemove unlinks free entry i from the idle list.
func (t *Table) idleRemove(i uint32) {
	e := t.ent(i)
	p, nx := idlePrev(e), idleNext(e)
	t.idleRelink(p, nx, nx, p)
	e.grant = 0
	t.idle.n--
}

// The connections that hold locks, each with the number of locks it holds
// in this table: an entry names its holder by a 32-bit reference (issue #21).
// A reference whose count falls to zero is kept (t.zeroRefs of them), so
// that connections taking turns on a table re-acquire without a map update
// (issue 35: the delete and re-insert were 3 % of the pipelined row); once
// more than max(16, len(conns)/4) are kept, one pass frees them all, which
// amortizes to O(1) per release.

type connRef struct {
	conn uint64
	refs uint32
}

// minZeroRefs is how many unused connection references are kept at least.
const minZeroRefs = 16

// refConn returns conn's reference, counting one more lock held.
func (t *Table) refConn(conn uint64) uint32 {
	r := t.lastRef
	if r == 0 || t.conns[r-1].conn != conn {
		r = t.connIx[conn]
		if r == 0 {
			if n := len(t.freeRefs); n > 0 {
				r = t.freeRefs[n-1]
				t.freeRefs = t.freeRefs[:n-1]
				t.conns[r-1] = connRef{conn: conn}
			} else {
				t.conns = append(t.conns, connRef{conn: conn})
				r = uint32(len(t.conns))
			}
			if t.connIx == nil {
				t.connIx = make(map[uint64]uint32)
			}
			t.connIx[conn] = r
			t.zeroRefs++ // counted as kept until the increment below
		}
		t.lastRef = r
	}
	if t.conns[r-1].refs == 0 {
		t.zeroRefs--
	}
	t.conns[r-1].refs++
	return r
}

// unrefConn counts one lock less held by reference r.
func (t *Table) unrefConn(r uint32) {
	if t.conns[r-1].refs--; t.conns[r-1].refs == 0 {
		if t.zeroRefs++; t.zeroRefs > max(minZeroRefs, len(t.conns)/4) {
			t.sweepConns()
		}
	}
}

// sweepConns frees every kept reference that holds nothing.
func (t *Table) sweepConns() {
	for r := uint32(1); int(r) <= len(t.conns); r++ { // freeConn may empty conns
		if c := t.conns[r-1]; c.refs == 0 && t.connIx[c.conn] == r {
			t.freeConn(r)
		}
	}
	t.zeroRefs = 0
}

func (t *Table) freeConn(r uint32) {
	delete(t.connIx, t.conns[r-1].conn)
	t.conns[r-1] = connRef{}
	if r == t.lastRef {
		t.lastRef = 0
	}
	if len(t.connIx) == 0 { // no one holds anything: start over (memory falls back after a burst)
		if cap(t.conns) > 64 {
			t.conns, t.freeRefs = nil, nil
		}
		t.conns, t.freeRefs = t.conns[:0], t.freeRefs[:0]
		return
	}
	t.freeRefs = append(t.freeRefs, r)
}

func (t *Table) holderConn(e *entry) uint64 { return t.conns[e.holder-1].conn }
