package locktable

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/ticketing/ticketing/client/wire"
)

// ---------------------------------------------------------------------------
// Reference model: protocol.md §5/§6 written as plainly as possible. Per key:
// the holder's token and lease deadline, and a slice of waiters. Timers are
// not kept anywhere: Advance scans every lease and wait for the earliest due
// one. Equal deadlines go in the order they were armed (a grant arms a lease,
// a queued acquire arms a wait); every event is processed at the instant the
// command carries ("now"), which is why a late expiry skips waiters whose wait
// has elapsed by then.

type mWaiter struct {
	owner   Owner
	leaseMS uint32
	enq     int64 // instant it queued
	waitAt  int64 // its wait deadline
	seq     uint64
}

type mLock struct {
	token   uint64
	leaseAt int64
	seq     uint64
	q       []mWaiter
}

type model struct {
	lim     Limits
	shardOf func(key string) int
	locks   map[string]*mLock // held keys only
	tok     uint64            // last token issued
	seq     uint64            // last timer armed
	cnt     []Counters        // per shard
	deliv   []Effect          // Sink deliveries of the current command
}

func newModel(lim Limits, shards int, shardOf func(string) int, firstTok uint64) *model {
	return &model{lim: lim, shardOf: shardOf, locks: map[string]*mLock{}, tok: firstTok - 1, cnt: make([]Counters, shards)}
}

func (m *model) take() []Effect {
	d := m.deliv
	m.deliv = nil
	return d
}

func (m *model) activeKeys() (n int) { return len(m.locks) }

func (m *model) waiters() (n int) {
	for _, l := range m.locks {
		n += len(l.q)
	}
	return n
}

func (m *model) shardKeys(s int) []string {
	var ks []string
	for k := range m.locks {
		if m.shardOf(k) == s {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func (m *model) queuedIn(s int, o Owner) (string, int, bool) {
	for _, k := range m.shardKeys(s) {
		for i, w := range m.locks[k].q {
			if w.owner == o {
				return k, i, true
			}
		}
	}
	return "", 0, false
}

func units(ns int64) uint16 {
	u := ns / (16 * ms)
	if u < 0 {
		return 0
	}
	return uint16(min(u, 65535))
}

func satAdd(now int64, d int64) int64 {
	if now > math.MaxInt64-d {
		return math.MaxInt64
	}
	return now + d
}

func (m *model) grant(now int64, key string, leaseMS uint32) *mLock {
	l := m.locks[key]
	if l == nil {
		l = &mLock{}
		m.locks[key] = l
	}
	m.tok++
	m.seq++
	l.token, l.leaseAt, l.seq = m.tok, satAdd(now, int64(leaseMS)*ms), m.seq
	m.cnt[m.shardOf(key)].Grants++
	return l
}

func (m *model) acquire(now int64, o Owner, key string, leaseMS, waitMS uint32) Effect {
	c := &m.cnt[m.shardOf(key)]
	if _, _, dup := m.queuedIn(m.shardOf(key), o); dup {
		return Effect{Owner: o, Status: wire.StatusError, Code: wire.CodeDuplicateReqID}
	}
	l := m.locks[key]
	switch {
	case l == nil && m.lim.MaxKeys > 0 && m.activeKeys() >= m.lim.MaxKeys:
		c.Busy++
		return effB(o, wire.CodeOverloaded)
	case l == nil:
		return effG(o, m.grant(now, key, leaseMS).token, 0)
	case waitMS == 0:
		c.Timeouts++
		return effT(o)
	case m.lim.MaxWaitersPerKey > 0 && len(l.q) >= m.lim.MaxWaitersPerKey:
		c.Busy++
		return effB(o, wire.CodeQueueFull)
	case m.lim.MaxWaiters > 0 && m.waiters() >= m.lim.MaxWaiters:
		c.Busy++
		return effB(o, wire.CodeOverloaded)
	}
	m.seq++
	l.q = append(l.q, mWaiter{owner: o, leaseMS: leaseMS, enq: now, waitAt: satAdd(now, int64(waitMS)*ms), seq: m.seq})
	return effQ(o)
}

// handoffOrFree: the first waiter whose wait has not elapsed gets the key
// with a new token; the elapsed ones before it get T; no waiter: free.
func (m *model) handoffOrFree(now int64, key string) {
	c := &m.cnt[m.shardOf(key)]
	l := m.locks[key]
	for len(l.q) > 0 {
		w := l.q[0]
		l.q = l.q[1:]
		if w.waitAt <= now {
			c.Timeouts++
			m.deliv = append(m.deliv, effT(w.owner))
			continue
		}
		m.grant(now, key, w.leaseMS)
		c.Handoffs++
		m.deliv = append(m.deliv, effG(w.owner, l.token, units(now-w.enq)))
		return
	}
	delete(m.locks, key)
}

func (m *model) release(now int64, o Owner, key string, tok uint64) Effect {
	c := &m.cnt[m.shardOf(key)]
	l := m.locks[key]
	if l == nil || l.token != tok {
		c.NotHolder++
		return effN(o)
	}
	c.Releases++
	m.handoffOrFree(now, key)
	return effO(o)
}

func (m *model) cancel(o Owner, key string, target uint32) Effect {
	c := &m.cnt[m.shardOf(key)]
	if l := m.locks[key]; l != nil {
		for i, w := range l.q {
			if w.owner == (Owner{Conn: o.Conn, ReqID: target}) {
				l.q = slices.Delete(l.q, i, i+1)
				c.Cancels++
				c.Timeouts++
				m.deliv = append(m.deliv, effT(w.owner))
				return effO(o)
			}
		}
	}
	c.NotHolder++
	return effN(o)
}

func (m *model) nextDeadline(s int) (int64, bool) {
	best, ok := int64(0), false
	for _, k := range m.shardKeys(s) {
		l := m.locks[k]
		if !ok || l.leaseAt < best {
			best, ok = l.leaseAt, true
		}
		for _, w := range l.q {
			best = min(best, w.waitAt)
		}
	}
	return best, ok
}

func (m *model) advance(s int, now int64) int {
	n := 0
	for {
		// the earliest due timer of shard s, by (deadline, arm order)
		var (
			found     bool
			at        int64
			seq       uint64
			key       string
			waiterIdx = -1
		)
		consider := func(a int64, q uint64, k string, wi int) {
			if a <= now && (!found || a < at || (a == at && q < seq)) {
				found, at, seq, key, waiterIdx = true, a, q, k, wi
			}
		}
		for _, k := range m.shardKeys(s) {
			l := m.locks[k]
			consider(l.leaseAt, l.seq, k, -1)
			for i, w := range l.q {
				consider(w.waitAt, w.seq, k, i)
			}
		}
		if !found {
			return n
		}
		n++
		if waiterIdx < 0 {
			m.cnt[s].Expiries++
			m.handoffOrFree(now, key)
		} else {
			l := m.locks[key]
			w := l.q[waiterIdx]
			l.q = slices.Delete(l.q, waiterIdx, waiterIdx+1)
			m.cnt[s].Timeouts++
			m.deliv = append(m.deliv, effT(w.owner))
		}
	}
}

func (m *model) dropConn(s int, conn uint64) int {
	n := 0
	for _, k := range m.shardKeys(s) {
		l := m.locks[k]
		l.q = slices.DeleteFunc(l.q, func(w mWaiter) bool {
			if w.owner.Conn == conn {
				n++
				return true
			}
			return false
		})
	}
	return n
}

func (m *model) drain(s int) int {
	var all []mWaiter
	for _, k := range m.shardKeys(s) {
		all = append(all, m.locks[k].q...)
		m.locks[k].q = nil
	}
	slices.SortFunc(all, func(a, b mWaiter) int { return cmpU64(a.seq, b.seq) })
	for _, w := range all {
		m.cnt[s].Busy++
		m.deliv = append(m.deliv, effB(w.owner, wire.CodeShuttingDown))
	}
	return len(all)
}

func (m *model) expire(now int64, key string, tok uint64) bool {
	l := m.locks[key]
	if l == nil || l.token != tok {
		return false
	}
	m.cnt[m.shardOf(key)].Expiries++
	m.handoffOrFree(now, key)
	return true
}

func (m *model) waitTimeout(s int, o Owner) bool {
	k, i, ok := m.queuedIn(s, o)
	if !ok {
		return false
	}
	l := m.locks[k]
	l.q = slices.Delete(l.q, i, i+1)
	m.cnt[s].Timeouts++
	m.deliv = append(m.deliv, effT(o))
	return true
}

// ---------------------------------------------------------------------------
// Harness: drives the real tables (1 or 2 shards sharing Counts and the token
// source, like the single-node server) and the model with the same commands,
// compares every answer, and checks observational safety properties that do
// not trust the model.

type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// chooser draws bounded choices (from rapid, or from fuzz bytes).
type chooser interface {
	intn(n int, label string) int
}

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) intn(n int, label string) int { return rapid.IntRange(0, n-1).Draw(c.t, label) }

var (
	modelKeys = []string{"a", "b", "c", "d", "e"}
	leases    = []uint32{1, 5, 16, 30, 50, 100, 4_294_967_295}
	waits     = []uint32{0, 0, 1, 10, 16, 30, 50, 200, 4_294_967_295}
	nConns    = 4
)

type pend struct {
	key     string
	leaseMS uint32
}

type obsGrant struct {
	tok      uint64
	leaseEnd int64
	ended    bool
}

type harness struct {
	f      failer
	shards int
	tabs   []*Table
	sinks  []*recSink
	counts *SharedCounts
	m      *model
	now    int64

	// observations (independent of the model)
	lastTok uint64
	issued  []uint64
	out     []map[Owner]pend   // per shard: queued acquires not yet answered
	pendKey map[string][]Owner // per key: queued acquires not yet answered, in arrival order
	grants  map[string]*obsGrant
	nextReq []uint32
	steps   int
	trace   []string
}

func newHarness(f failer, lim Limits, shards int) *harness {
	h := &harness{f: f, shards: shards, counts: &SharedCounts{}, now: t0,
		pendKey: map[string][]Owner{}, grants: map[string]*obsGrant{}, nextReq: make([]uint32, nConns+1)}
	tok := NewCounter(first)
	h.lastTok = first - 1
	for range shards {
		s := &recSink{}
		h.sinks = append(h.sinks, s)
		h.tabs = append(h.tabs, New(lim, tok, h.counts, s))
		h.out = append(h.out, map[Owner]pend{})
	}
	h.m = newModel(lim, shards, h.shardOf, first)
	return h
}

// drawIndex shrinks the tables' index so that the model's few keys grow it
// through incremental resizes (issue #29 item 6), migrating as few as one old
// slot per operation (a migration then also finishes early when the new
// arrays fill).
func (h *harness) drawIndex(c chooser) {
	ixMin := []int{0, 2, 3, 2}[c.intn(4, "ixMin")]
	step := []int{0, 1, 4, 2}[c.intn(4, "ixStep")]
	for _, tb := range h.tabs {
		tb.ixMin, tb.ixStep = ixMin, step
	}
}

func (h *harness) shardOf(key string) int { return slices.Index(modelKeys, key) % h.shards }

func (h *harness) fatalf(format string, args ...any) {
	h.f.Helper()
	tail := h.trace[max(0, len(h.trace)-30):]
	h.f.Fatalf("step %d, t=%dns: %s\nlast commands:\n  %s", h.steps, h.now-t0, fmt.Sprintf(format, args...), joinLines(tail))
}

func joinLines(s []string) string {
	out := ""
	for i, l := range s {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

// run applies one command to the table (real) and to the model (mod), and
// compares the results and the Sink deliveries, which it returns for the
// caller to observe.
func run[R comparable](h *harness, s int, desc string, real, mod func() R) (R, []Effect) {
	h.f.Helper()
	h.steps++
	h.trace = append(h.trace, fmt.Sprintf("t=%d shard%d %s", h.now-t0, s, desc))
	got := real()
	gotD := h.sinks[s].take()
	want := mod()
	wantD := h.m.take()
	if got != want {
		h.fatalf("%s = %+v, model %+v", desc, got, want)
	}
	if !slices.Equal(gotD, wantD) {
		h.fatalf("%s deliveries:\n got %+v\nwant %+v", desc, gotD, wantD)
	}
	return got, gotD
}

func (h *harness) observeGrant(key string, tok uint64, leaseMS uint32) {
	h.f.Helper()
	if tok == 0 || tok <= h.lastTok {
		h.fatalf("token %d for %q not above the previous %d", tok, key, h.lastTok)
	}
	h.lastTok = tok
	h.issued = append(h.issued, tok)
	if g := h.grants[key]; g != nil && !g.ended && g.leaseEnd > h.now {
		h.fatalf("two holders of %q: token %d (lease to %d) and %d", key, g.tok, g.leaseEnd-t0, tok)
	}
	h.grants[key] = &obsGrant{tok: tok, leaseEnd: satAdd(h.now, int64(leaseMS)*ms)}
}

func (h *harness) observeDeliveries(s int, ds []Effect) {
	h.f.Helper()
	for _, e := range ds {
		p, ok := h.out[s][e.Owner]
		if !ok {
			h.fatalf("delivery %+v answers no outstanding acquire (twice, or never queued)", e)
		}
		delete(h.out[s], e.Owner)
		q := h.pendKey[p.key]
		i := slices.Index(q, e.Owner)
		switch e.Status {
		case wire.StatusGranted:
			if i != 0 {
				h.fatalf("FIFO: %v granted %q ahead of %v", e.Owner, p.key, q[:i])
			}
			h.observeGrant(p.key, e.Token, p.leaseMS)
		case wire.StatusTimeout, wire.StatusBusy:
		default:
			h.fatalf("delivery with status %c", e.Status)
		}
		h.pendKey[p.key] = slices.Delete(q, i, i+1)
	}
}

func (h *harness) forgetConn(s int, conn uint64) {
	for o, p := range h.out[s] {
		if o.Conn == conn {
			delete(h.out[s], o)
			h.pendKey[p.key] = slices.DeleteFunc(h.pendKey[p.key], func(x Owner) bool { return x == o })
		}
	}
}

// ---- commands

func (h *harness) acquire(c chooser) {
	conn := uint64(1 + c.intn(nConns, "conn"))
	key := modelKeys[c.intn(len(modelKeys), "key")]
	lease := leases[c.intn(len(leases), "lease")]
	wait := waits[c.intn(len(waits), "wait")]
	s := h.shardOf(key)
	var req uint32
	if c.intn(10, "reuse req_id") == 0 { // sometimes a req_id still outstanding somewhere
		for o := range h.out[c.intn(h.shards, "shard")] {
			if o.Conn == conn && (req == 0 || o.ReqID < req) {
				req = o.ReqID
			}
		}
	}
	if req == 0 {
		h.nextReq[conn]++
		req = h.nextReq[conn]
	}
	o := Owner{Conn: conn, ReqID: req}
	e, d := run(h, s, fmt.Sprintf("Acquire(%v, %q, lease %d, wait %d)", o, key, lease, wait),
		func() Effect { return h.tabs[s].Acquire(h.now, o, []byte(key), lease, wait) },
		func() Effect { return h.m.acquire(h.now, o, key, lease, wait) })
	switch e.Status {
	case wire.StatusGranted:
		if e.Queued != 0 {
			h.fatalf("immediate grant with queued %d", e.Queued)
		}
		h.observeGrant(key, e.Token, lease)
	case Queued:
		if _, dup := h.out[s][o]; dup {
			h.fatalf("%v queued twice", o)
		}
		h.out[s][o] = pend{key: key, leaseMS: lease}
		h.pendKey[key] = append(h.pendKey[key], o)
	case wire.StatusError:
		if _, dup := h.out[s][o]; !dup {
			h.fatalf("E for %v, which has nothing outstanding here", o)
		}
	}
	if len(d) > 0 {
		h.fatalf("Acquire delivered %+v", d)
	}
}

func (h *harness) pickToken(c chooser, key string) uint64 {
	switch c.intn(6, "token kind") {
	case 0, 1, 2: // the holder's
		if l := h.m.locks[key]; l != nil {
			return l.token
		}
		return 0
	case 3: // some token issued before (stale, or another key's)
		if len(h.issued) > 0 {
			return h.issued[c.intn(len(h.issued), "issued")]
		}
		return 0
	case 4:
		return 0
	default:
		return h.lastTok + 1 // not issued yet
	}
}

func (h *harness) release(c chooser) {
	key := modelKeys[c.intn(len(modelKeys), "key")]
	tok := h.pickToken(c, key)
	o := Owner{Conn: uint64(1 + c.intn(nConns, "conn")), ReqID: 1 << 31}
	s := h.shardOf(key)
	e, d := run(h, s, fmt.Sprintf("Release(%q, %d)", key, tok),
		func() Effect { return h.tabs[s].Release(h.now, o, []byte(key), tok) },
		func() Effect { return h.m.release(h.now, o, key, tok) })
	g := h.grants[key]
	if e.Status == wire.StatusReleased {
		if g == nil || g.tok != tok || g.ended {
			h.fatalf("O for %q with token %d, which is not the current grant", key, tok)
		}
		g.ended = true
	} else if len(d) > 0 {
		h.fatalf("N with deliveries %+v", d)
	}
	h.observeDeliveries(s, d)
}

func (h *harness) cancel(c chooser) {
	conn := uint64(1 + c.intn(nConns, "conn"))
	key := modelKeys[c.intn(len(modelKeys), "key")]
	var target uint32
	switch c.intn(4, "target kind") {
	case 0, 1: // one of this connection's queued acquires (on this key or another)
		var mine []Owner
		for s := range h.shards {
			for o := range h.out[s] {
				if o.Conn == conn {
					mine = append(mine, o)
				}
			}
		}
		slices.SortFunc(mine, func(a, b Owner) int { return int(a.ReqID) - int(b.ReqID) })
		if len(mine) > 0 {
			target = mine[c.intn(len(mine), "mine")].ReqID
			if c.intn(3, "right key") > 0 {
				for s := range h.shards {
					if p, ok := h.out[s][Owner{Conn: conn, ReqID: target}]; ok {
						key = p.key
					}
				}
			}
		}
	case 2: // an answered or never-sent req_id
		target = uint32(c.intn(int(h.nextReq[conn])+2, "old"))
	default: // another connection's
		other := uint64(1 + c.intn(nConns, "other"))
		for o := range h.out[h.shardOf(key)] {
			if o.Conn == other && (target == 0 || o.ReqID < target) {
				target = o.ReqID
			}
		}
	}
	o := Owner{Conn: conn, ReqID: 1<<31 + 1}
	s := h.shardOf(key)
	e, d := run(h, s, fmt.Sprintf("Cancel(conn %d, %q, target %d)", conn, key, target),
		func() Effect { return h.tabs[s].Cancel(h.now, o, []byte(key), target) },
		func() Effect { return h.m.cancel(o, key, target) })
	want := []Effect(nil)
	if e.Status == wire.StatusReleased { // T to the withdrawn acquire, then O
		want = []Effect{effT(Owner{Conn: conn, ReqID: target})}
	}
	if !slices.Equal(d, want) {
		h.fatalf("Cancel answered %+v after deliveries %+v", e, d)
	}
	h.observeDeliveries(s, d)
}

func (h *harness) step(c chooser) int64 {
	switch c.intn(13, "step") {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return ms
	case 3:
		return 5 * ms
	case 4:
		return 16 * ms
	case 5:
		return 17 * ms
	case 6:
		return 50 * ms
	case 7:
		return 100 * ms
	case 8:
		return 1000 * ms
	case 9, 10, 11: // to (or just before) the next deadline
		best, ok := int64(0), false
		for s := range h.shards {
			if d, k := h.m.nextDeadline(s); k && (!ok || d < best) {
				best, ok = d, true
			}
		}
		if !ok || best <= h.now || best == math.MaxInt64 {
			return 0
		}
		if c.intn(2, "just before") == 0 {
			return best - h.now - 1
		}
		return best - h.now
	default:
		return 20 * 60_000 * ms // past the saturation of the queued field
	}
}

// tick moves time without processing timers: the next commands run with
// deadlines overdue (a release racing a wait deadline).
func (h *harness) tick(c chooser) {
	h.now += h.step(c)
	h.trace = append(h.trace, fmt.Sprintf("tick to %d", h.now-t0))
}

func (h *harness) advance(c chooser) {
	h.now += h.step(c)
	all := c.intn(3, "all shards") > 0
	one := c.intn(h.shards, "shard")
	for s := range h.shards {
		if all || s == one {
			_, d := run(h, s, "Advance", func() int { return h.tabs[s].Advance(h.now) }, func() int { return h.m.advance(s, h.now) })
			h.observeDeliveries(s, d)
		}
	}
}

func (h *harness) dropConn(c chooser) {
	conn := uint64(1 + c.intn(nConns, "conn"))
	for s := range h.shards {
		_, d := run(h, s, fmt.Sprintf("DropConn(%d)", conn), func() int { return h.tabs[s].DropConn(conn) }, func() int { return h.m.dropConn(s, conn) })
		if len(d) > 0 {
			h.fatalf("DropConn delivered %+v", d)
		}
		h.forgetConn(s, conn)
	}
}

func (h *harness) drain(c chooser) {
	s := c.intn(h.shards, "shard")
	_, d := run(h, s, "DrainWaiters", func() int { return h.tabs[s].DrainWaiters() }, func() int { return h.m.drain(s) })
	for _, e := range d {
		if e.Status != wire.StatusBusy || e.Code != wire.CodeShuttingDown {
			h.fatalf("drain delivered %+v", e)
		}
	}
	h.observeDeliveries(s, d)
}

func (h *harness) expire(c chooser) {
	key := modelKeys[c.intn(len(modelKeys), "key")]
	tok := h.pickToken(c, key)
	s := h.shardOf(key)
	ok, d := run(h, s, fmt.Sprintf("Expire(%q, %d)", key, tok),
		func() bool { return h.tabs[s].Expire(h.now, []byte(key), tok) },
		func() bool { return h.m.expire(h.now, key, tok) })
	if ok {
		h.grants[key].ended = true // the cluster decided this lease ended
	}
	h.observeDeliveries(s, d)
}

func (h *harness) waitTimeout(c chooser) {
	s := c.intn(h.shards, "shard")
	o := Owner{Conn: uint64(1 + c.intn(nConns, "conn")), ReqID: uint32(1 + c.intn(8, "req"))}
	_, d := run(h, s, fmt.Sprintf("WaitTimeout(%v)", o), func() bool { return h.tabs[s].WaitTimeout(o) }, func() bool { return h.m.waitTimeout(s, o) })
	h.observeDeliveries(s, d)
}

// check compares every observable of the tables with the model.
func (h *harness) check() {
	h.f.Helper()
	for s, tb := range h.tabs {
		if err := tb.CheckInvariants(); err != nil {
			h.fatalf("shard %d invariants: %v", s, err)
		}
		if got, want := tb.Counters(), h.m.cnt[s]; got != want {
			h.fatalf("shard %d counters\n got %+v\nwant %+v", s, got, want)
		}
		keys := h.m.shardKeys(s)
		waiters := 0
		for _, k := range keys {
			waiters += len(h.m.locks[k].q)
		}
		if tb.ActiveKeys() != len(keys) || tb.Holders() != len(keys) || tb.Waiters() != waiters {
			h.fatalf("shard %d: ActiveKeys %d Holders %d Waiters %d, model %d keys %d waiters",
				s, tb.ActiveKeys(), tb.Holders(), tb.Waiters(), len(keys), waiters)
		}
		d, ok := tb.NextDeadline()
		md, mok := h.m.nextDeadline(s)
		if d != md || ok != mok {
			h.fatalf("shard %d NextDeadline %d %v, model %d %v", s, d, ok, md, mok)
		}
		infos := map[string]LockInfo{}
		tb.Locks(h.now, "", func(li LockInfo) bool { infos[li.Key] = li; return true })
		if len(infos) != len(keys) {
			h.fatalf("shard %d Locks lists %d keys, model %d", s, len(infos), len(keys))
		}
		for _, k := range keys {
			l := h.m.locks[k]
			want := LockInfo{Key: k, Token: l.token, LeaseRemainingMS: max(0, l.leaseAt-h.now) / ms, QueueDepth: len(l.q)}
			if len(l.q) > 0 {
				want.OldestWaiterAgeMS = max(0, h.now-l.q[0].enq) / ms
			}
			got := infos[k]
			got.HolderConn, got.Waiters = 0, nil // protocol 1.1 detail, checked in sets_test.go
			if !reflect.DeepEqual(got, want) {
				h.fatalf("Locks %q = %+v, model %+v", k, infos[k], want)
			}
		}
		for o := range h.out[s] {
			if !tb.Outstanding(o) {
				h.fatalf("%v queued and unanswered but not Outstanding", o)
			}
		}
	}
	if h.counts.Keys() != int64(h.m.activeKeys()) || h.counts.Waiters() != int64(h.m.waiters()) {
		h.fatalf("SharedCounts keys %d waiters %d, model %d %d", h.counts.Keys(), h.counts.Waiters(), h.m.activeKeys(), h.m.waiters())
	}
	for _, k := range modelKeys {
		tb := h.tabs[h.shardOf(k)]
		tok, dl, ok := tb.Holder(k)
		l := h.m.locks[k]
		if (l != nil) != ok || (ok && (tok != l.token || dl != l.leaseAt)) {
			h.fatalf("Holder(%q) = %d %d %v, model %+v", k, tok, dl, ok, l)
		}
		var mq []Owner
		if l != nil {
			for _, w := range l.q {
				mq = append(mq, w.owner)
			}
		}
		if q := tb.QueueOf(k); !slices.Equal(q, mq) {
			h.fatalf("QueueOf(%q) = %v, model %v", k, q, mq)
		}
		if !slices.Equal(mq, h.pendKey[k]) {
			h.fatalf("queue of %q %v, but unanswered acquires in arrival order are %v", k, mq, h.pendKey[k])
		}
	}
}

// finish runs time far ahead: every queued acquire must have been answered
// exactly once (or dropped with its connection), every lease ended.
func (h *harness) finish() {
	h.f.Helper()
	h.now += 2 * 4_294_967_295 * ms
	for s := range h.shards {
		_, d := run(h, s, "Advance(end)", func() int { return h.tabs[s].Advance(h.now) }, func() int { return h.m.advance(s, h.now) })
		h.observeDeliveries(s, d)
	}
	h.check()
	for s := range h.shards {
		if len(h.out[s]) != 0 {
			h.fatalf("shard %d: acquires never answered: %v", s, h.out[s])
		}
		if h.tabs[s].ActiveKeys() != 0 || h.tabs[s].Waiters() != 0 {
			h.fatalf("shard %d still active", s)
		}
	}
	if h.counts.Keys() != 0 || h.counts.Waiters() != 0 {
		h.fatalf("SharedCounts not back to 0")
	}
}

type namedAction struct {
	name string
	fn   func(h *harness, c chooser)
}

var actions = []namedAction{
	{"acquire", (*harness).acquire},
	{"acquire2", (*harness).acquire},
	{"acquire3", (*harness).acquire},
	{"release", (*harness).release},
	{"release2", (*harness).release},
	{"cancel", (*harness).cancel},
	{"tick", (*harness).tick},
	{"advance", (*harness).advance},
	{"advance2", (*harness).advance},
	{"dropConn", (*harness).dropConn},
	{"drain", (*harness).drain},
	{"expire", (*harness).expire},
	{"waitTimeout", (*harness).waitTimeout},
}

func drawLimits(c chooser) (Limits, int) {
	lim := Limits{
		MaxKeys:          []int{0, 0, 2, 3, 4}[c.intn(5, "MaxKeys")],
		MaxWaiters:       []int{0, 0, 2, 4, 6}[c.intn(5, "MaxWaiters")],
		MaxWaitersPerKey: []int{0, 0, 1, 2, 3}[c.intn(5, "MaxWaitersPerKey")],
		IdleCache:        []int{0, -1, 1, 2}[c.intn(4, "IdleCache")],
	}
	return lim, 1 + c.intn(2, "shards")
}

func TestModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := rapidChooser{rt}
		lim, shards := drawLimits(c)
		h := newHarness(rt, lim, shards)
		h.drawIndex(c)
		m := map[string]func(*rapid.T){"": func(*rapid.T) { h.check() }}
		for _, a := range actions {
			m[a.name] = func(rt *rapid.T) { a.fn(h, rapidChooser{rt}) }
		}
		rt.Repeat(m)
		h.finish()
	})
}

// ---------------------------------------------------------------------------
// Fuzzing: the same harness, driven by a byte string.

type byteChooser struct {
	b []byte
}

func (c *byteChooser) intn(n int, _ string) int {
	if n <= 1 || len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	if n > 256 && len(c.b) > 0 {
		v = v<<8 | int(c.b[0])
		c.b = c.b[1:]
	}
	return v % n
}

func FuzzTable(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 3, 0, 1, 1, 3, 1, 7, 9})
	f.Add([]byte("\x02\x02\x01\x03\x01\x00\x00\x01\x02\x05\x00\x00\x01\x01\x03\x06\x00\x04\x07\x09\x03\x01"))
	f.Add([]byte("acquire release cancel tick advance drop drain expire wait timeout 0123456789"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		c := &byteChooser{b: data}
		lim, shards := drawLimits(c)
		h := newHarness(t, lim, shards)
		h.drawIndex(c)
		for len(c.b) > 0 {
			a := actions[c.intn(len(actions), "action")]
			a.fn(h, c)
			h.check()
		}
		h.finish()
	})
}
