package locktable

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/ticketing/ticketing/client/wire"
)

func bkeys(ks ...string) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = []byte(k)
	}
	return out
}

func (f *fx) acqSet(now int64, o Owner, keys []string, leaseMS, waitMS uint32, want Effect) {
	f.t.Helper()
	if got := f.tb.AcquireSet(now, o, bkeys(keys...), leaseMS, waitMS); got != want {
		f.t.Fatalf("AcquireSet(%v, %q, lease %d, wait %d) = %+v, want %+v", o, keys, leaseMS, waitMS, got, want)
	}
	f.check()
}

func (f *fx) relSet(now int64, o Owner, keys []string, tok uint64, want Effect) {
	f.t.Helper()
	if got := f.tb.ReleaseSet(now, o, bkeys(keys...), tok); got != want {
		f.t.Fatalf("ReleaseSet(%v, %q, %d) = %+v, want %+v", o, keys, tok, got, want)
	}
	f.check()
}

func TestSetGrantReleaseExact(t *testing.T) {
	f := newFx(t, Limits{})
	a, b := own(1, 1), own(2, 1)
	f.acqSet(t0, a, []string{"x", "y"}, 1000, 0, effG(a, first, 0))
	if tok, _, ok := f.tb.Holder("y"); !ok || tok != first {
		t.Fatalf("y holder %d %v", tok, ok)
	}
	if f.tb.Holders() != 2 || f.tb.ActiveKeys() != 2 {
		t.Fatalf("holders %d active %d", f.tb.Holders(), f.tb.ActiveKeys())
	}
	// R on one key of a set is N; X with a missing, an extra or a wrong key, or the wrong token, is N
	f.rel(t0, b, "x", first, effN(b))
	f.relSet(t0, b, []string{"x"}, first, effN(b))
	f.relSet(t0, b, []string{"x", "z"}, first, effN(b))
	f.relSet(t0, b, []string{"x", "y", "z"}, first, effN(b))
	f.relSet(t0, b, []string{"x", "y"}, first+1, effN(b))
	// a try-once on a held key, as a set or alone, is T
	f.acqSet(t0, b, []string{"y", "z"}, 1000, 0, effT(b))
	f.acq(t0, b, "x", 1000, 0, effT(b))
	// the exact set in another order is O, once
	f.relSet(t0, b, []string{"y", "x"}, first, effO(b))
	f.relSet(t0, b, []string{"y", "x"}, first, effN(b))
	if f.tb.ActiveKeys() != 0 {
		t.Fatalf("active %d after release", f.tb.ActiveKeys())
	}
	// a token strictly above every earlier one, on any key
	f.acq(t0, a, "x", 1000, 0, effG(a, first+1, 0))
	f.acqSet(t0, b, []string{"y", "z"}, 1000, 0, effG(b, first+2, 0))
}

// A set waits behind a holder; a key of the set that is free is blocked: a
// later single acquire queues behind the set even though the key is free.
func TestSetBlocksFreeKeyFIFO(t *testing.T) {
	f := newFx(t, Limits{})
	h, s, late := own(1, 1), own(2, 1), own(3, 1)
	f.acq(t0, h, "x", 1000, 0, effG(h, first, 0))
	f.acqSet(t0, s, []string{"x", "y"}, 1000, 5000, effQ(s))
	if _, _, held := f.tb.Holder("y"); held {
		t.Fatal("y held while only blocked for the waiting set")
	}
	f.acq(t0, late, "y", 1000, 0, effT(late)) // y is not free: a set waits on it
	f.acq(t0, late, "y", 1000, 5000, effQ(late))
	if got := f.tb.QueueOf("y"); !reflect.DeepEqual(got, []Owner{s, late}) {
		t.Fatalf("queue of y %v", got)
	}
	// the release of x grants the set both keys with one token
	f.rel(t0+16*ms, h, "x", first, effO(h))
	f.delivered(effG(s, first+1, 1))
	f.relSet(t0+20*ms, s, []string{"x", "y"}, first+1, effO(s))
	f.delivered(effG(late, first+2, 1))
}

func TestSetExpiryFreesAllAndHandsOffEach(t *testing.T) {
	f := newFx(t, Limits{})
	s, w1, w2 := own(1, 1), own(2, 1), own(3, 1)
	f.acqSet(t0, s, []string{"a", "b", "c"}, 100, 0, effG(s, first, 0))
	f.acq(t0, w1, "b", 1000, 5000, effQ(w1))
	f.acqSet(t0, w2, []string{"c", "d"}, 1000, 5000, effQ(w2))
	f.advance(t0+100*ms, 1) // one lease for the whole set: one expiry
	f.delivered(effG(w1, first+1, 6), effG(w2, first+2, 6))
	if f.tb.Counters().Expiries != 1 {
		t.Fatalf("expiries %d", f.tb.Counters().Expiries)
	}
	if _, _, ok := f.tb.Holder("a"); ok {
		t.Fatal("a still held")
	}
}

func TestSetTimeoutAndCancelWithdrawFromEveryQueue(t *testing.T) {
	f := newFx(t, Limits{})
	h, s, w := own(1, 1), own(2, 7), own(3, 1)
	f.acq(t0, h, "a", 1000, 0, effG(h, first, 0))
	f.acqSet(t0, s, []string{"a", "b"}, 1000, 50, effQ(s))
	f.acq(t0, w, "b", 1000, 5000, effQ(w)) // behind the set on b (b is blocked)
	f.advance(t0+50*ms, 1)                 // the set's wait: T, withdrawn; b goes to w
	f.delivered(effT(s), effG(w, first+1, 3))

	// cancel names the set's req_id and its FIRST key; another key is N
	s2 := own(2, 8)
	f.acqSet(t0+60*ms, s2, []string{"b", "c"}, 1000, 5000, effQ(s2))
	f.cancel(t0+60*ms, own(2, 9), "c", 8, effN(own(2, 9)))
	f.cancel(t0+60*ms, own(2, 9), "b", 8, effO(own(2, 9)))
	f.delivered(effT(s2))
	if f.tb.ActiveKeys() != 2 || f.tb.Waiters() != 0 {
		t.Fatalf("active %d waiters %d", f.tb.ActiveKeys(), f.tb.Waiters())
	}
}

func TestSetLimitsAndDuplicates(t *testing.T) {
	f := newFx(t, Limits{MaxWaitersPerKey: 1, MaxKeys: 3})
	h, s, s2 := own(1, 1), own(2, 1), own(3, 1)
	f.acq(t0, h, "a", 1000, 0, effG(h, first, 0))
	f.acqSet(t0, s, []string{"a", "b"}, 1000, 5000, effQ(s))
	f.acqSet(t0, s, []string{"c", "d"}, 1000, 5000, Effect{Owner: s, Status: wire.StatusError, Code: wire.CodeDuplicateReqID})
	f.acqSet(t0, s2, []string{"b", "c"}, 1000, 5000, effB(s2, wire.CodeQueueFull))
	f.acqSet(t0, s2, []string{"c", "d"}, 1000, 5000, effB(s2, wire.CodeOverloaded)) // 2 new keys over max_keys 3
	if f.tb.Waiters() != 1 {
		t.Fatalf("a waiting set counts once: waiters %d", f.tb.Waiters())
	}
	f.tb.DropConn(2) // the set leaves silently; b is freed
	if f.tb.ActiveKeys() != 1 || len(f.sink.take()) != 0 {
		t.Fatalf("active %d", f.tb.ActiveKeys())
	}
}

func TestSetDrain(t *testing.T) {
	f := newFx(t, Limits{})
	h, s, w := own(1, 1), own(2, 1), own(3, 1)
	f.acq(t0, h, "a", 1000, 0, effG(h, first, 0))
	f.acqSet(t0, s, []string{"a", "b"}, 1000, 5000, effQ(s))
	f.acq(t0, w, "b", 1000, 5000, effQ(w))
	if n := f.tb.DrainWaiters(); n != 2 {
		t.Fatalf("drained %d", n)
	}
	f.delivered(effB(s, wire.CodeShuttingDown), effB(w, wire.CodeShuttingDown))
	f.check()
	if f.tb.ActiveKeys() != 1 {
		t.Fatalf("active %d", f.tb.ActiveKeys())
	}
}

func TestSetSnapshotRestore(t *testing.T) {
	f := newFx(t, Limits{})
	f.acqSet(t0, own(1, 1), []string{"a", "b"}, 1000, 0, effG(own(1, 1), first, 0))
	f.acq(t0, own(2, 1), "c", 1000, 0, effG(own(2, 1), first+1, 0))
	f.acq(t0, own(3, 1), "b", 1000, 5000, effQ(own(3, 1)))
	f.acqSet(t0, own(4, 1), []string{"c", "d", "b"}, 1000, 5000, effQ(own(4, 1)))
	f.acqSet(t0, own(5, 1), []string{"d", "e"}, 1000, 5000, effQ(own(5, 1)))
	st := f.tb.Snapshot()
	g := newFx(t, Limits{})
	g.tok.Restore(f.tok.Last())
	if err := g.tb.Restore(st); err != nil {
		t.Fatal(err)
	}
	g.check()
	if got := g.tb.Snapshot(); !reflect.DeepEqual(got, st) {
		t.Fatalf("restored snapshot differs:\n%+v\n%+v", got, st)
	}
	// both tables then behave the same
	for _, x := range []*fx{f, g} {
		x.relSet(t0+32*ms, own(9, 1), []string{"a", "b"}, first, effO(own(9, 1)))
		x.delivered(effG(own(3, 1), first+2, 2))
		x.rel(t0+32*ms, own(9, 2), "c", first+1, effO(own(9, 2)))
		x.rel(t0+32*ms, own(9, 3), "b", first+2, effO(own(9, 3)))
	}
	if a, b := f.sink.take(), g.sink.take(); !reflect.DeepEqual(a, b) || len(a) != 1 {
		t.Fatalf("deliveries %v vs %v", a, b)
	}
}

// ---------------------------------------------------------------------------
// Randomized model test with key sets: random mixes of single keys and sets
// (acquire, release, cancel, drop, time passing) checked after every step
// against the properties of §12.2: no key held twice, FIFO per key, no
// deadlock (CheckInvariants: no waiting set is left grantable; at the end
// every waiter has been granted or timed out), one answer per request.

type setReq struct {
	owner    Owner
	keys     []string
	arrived  int // arrival order
	answered bool
}

type heldRec struct {
	owner   Owner
	keys    []string
	leaseAt int64
}

type setHarness struct {
	t      *testing.T
	f      *fx
	rng    *rand.Rand
	now    int64
	reqs   map[Owner]*setReq
	queued map[string][]*setReq // per key, requests queued on it in arrival order (still waiting)
	held   map[uint64]*heldRec  // by token
	byKey  map[string]uint64    // key → token of its holder (by the harness' view)
	nextID uint32
	n      int
}

var setModelKeys = []string{"k0", "k1", "k2", "k3", "k4", "k5"}

func (h *setHarness) pickKeys() []string {
	n := 1
	if h.rng.IntN(2) == 0 {
		n = 2 + h.rng.IntN(3)
	}
	p := h.rng.Perm(len(setModelKeys))[:n]
	out := make([]string, n)
	for i, j := range p {
		out[i] = setModelKeys[j]
	}
	return out
}

func (h *setHarness) granted(o Owner, tok uint64, leaseMS uint32) {
	r := h.reqs[o]
	if r == nil || r.answered {
		h.t.Fatalf("G for %v: unknown or answered twice", o)
	}
	r.answered = true
	for _, k := range r.keys {
		if prev, ok := h.byKey[k]; ok {
			if hr := h.held[prev]; hr != nil && hr.leaseAt > h.now {
				h.t.Fatalf("key %s granted to %v while %v holds it (lease to %d, now %d)", k, o, hr.owner, hr.leaseAt, h.now)
			}
		}
		// FIFO per key: nobody that queued earlier on k still waits
		for _, q := range h.queued[k] {
			if q.arrived < r.arrived && !q.answered {
				h.t.Fatalf("key %s granted to %v (arrival %d) while %v (arrival %d) waits", k, o, r.arrived, q.owner, q.arrived)
			}
		}
		h.byKey[k] = tok
	}
	for _, hr := range h.held {
		if hr.leaseAt <= h.now {
			continue
		}
		for _, k := range hr.keys {
			if slices.Contains(r.keys, k) && h.byKey[k] != tok {
				h.t.Fatalf("key %s double held", k)
			}
		}
	}
	h.held[tok] = &heldRec{owner: o, keys: r.keys, leaseAt: h.now + int64(leaseMS)*ms}
}

func (h *setHarness) deliveries() {
	for _, e := range h.f.sink.take() {
		switch e.Status {
		case wire.StatusGranted:
			h.granted(e.Owner, e.Token, 100)
		case wire.StatusTimeout, wire.StatusBusy:
			r := h.reqs[e.Owner]
			if r == nil || r.answered {
				h.t.Fatalf("%c for %v: unknown or answered twice", e.Status, e.Owner)
			}
			r.answered = true
		default:
			h.t.Fatalf("delivered %+v", e)
		}
	}
}

func (h *setHarness) step() {
	f := h.f
	switch op := h.rng.IntN(10); {
	case op < 4: // acquire a key or a set
		h.nextID++
		o := Owner{Conn: uint64(1 + h.rng.IntN(4)), ReqID: h.nextID}
		keys := h.pickKeys()
		wait := uint32(h.rng.IntN(3) * 40)
		r := &setReq{owner: o, keys: keys, arrived: h.n}
		h.n++
		h.reqs[o] = r
		var e Effect
		if len(keys) == 1 {
			e = f.tb.Acquire(h.now, o, []byte(keys[0]), 100, wait)
		} else {
			e = f.tb.AcquireSet(h.now, o, bkeys(keys...), 100, wait)
		}
		switch e.Status {
		case wire.StatusGranted:
			h.granted(o, e.Token, 100)
		case Queued:
			for _, k := range keys {
				h.queued[k] = append(h.queued[k], r)
			}
		default:
			r.answered = true
		}
	case op < 6: // release something held (sometimes with a wrong shape)
		toks := make([]uint64, 0, len(h.held))
		for tok, hr := range h.held {
			if hr.leaseAt > h.now {
				toks = append(toks, tok)
			}
		}
		if len(toks) == 0 {
			return
		}
		slices.Sort(toks)
		tok := toks[h.rng.IntN(len(toks))]
		hr := h.held[tok]
		o := Owner{Conn: 9, ReqID: 1}
		var e Effect
		if len(hr.keys) == 1 {
			e = f.tb.Release(h.now, o, []byte(hr.keys[0]), tok)
		} else if h.rng.IntN(4) == 0 {
			if e = f.tb.Release(h.now, o, []byte(hr.keys[0]), tok); e.Status != wire.StatusNotHolder {
				h.t.Fatalf("R on a set key: %+v", e)
			}
			return
		} else {
			e = f.tb.ReleaseSet(h.now, o, bkeys(hr.keys...), tok)
		}
		if e.Status != wire.StatusReleased {
			h.t.Fatalf("release of held %v: %+v", hr.keys, e)
		}
		delete(h.held, tok)
	case op < 7: // cancel a waiting request by its first key
		var ws []*setReq
		for _, r := range h.reqs {
			if !r.answered && f.tb.Outstanding(r.owner) {
				ws = append(ws, r)
			}
		}
		if len(ws) == 0 {
			return
		}
		slices.SortFunc(ws, func(a, b *setReq) int { return a.arrived - b.arrived })
		r := ws[h.rng.IntN(len(ws))]
		if e := f.tb.Cancel(h.now, Owner{Conn: r.owner.Conn, ReqID: 0}, []byte(r.keys[0]), r.owner.ReqID); e.Status != wire.StatusReleased {
			h.t.Fatalf("cancel of waiting %v: %+v", r.owner, e)
		}
	case op < 8 && h.rng.IntN(4) == 0: // a connection goes away
		c := uint64(1 + h.rng.IntN(4))
		f.tb.DropConn(c)
		for _, r := range h.reqs {
			if r.owner.Conn == c && !r.answered {
				r.answered = true // left silently
			}
		}
	default: // time passes
		h.now += int64(h.rng.IntN(60)) * ms
		f.tb.Advance(h.now)
	}
	h.deliveries()
	f.check()
}

func TestSetModel(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			f := newFx(t, Limits{IdleCache: int(seed % 3)})
			h := &setHarness{t: t, f: f, rng: rand.New(rand.NewPCG(seed, 30)), now: t0,
				reqs: map[Owner]*setReq{}, queued: map[string][]*setReq{}, held: map[uint64]*heldRec{}, byKey: map[string]uint64{}}
			for range 300 {
				h.step()
			}
			// no deadlock: with time passing, every waiter is granted or times out
			h.now += 10_000 * ms
			f.tb.Advance(h.now)
			h.deliveries()
			for _, r := range h.reqs {
				if !r.answered {
					t.Fatalf("%v (%v) never answered", r.owner, r.keys)
				}
			}
			if f.tb.Waiters() != 0 || f.tb.ActiveKeys() != 0 {
				t.Fatalf("waiters %d active %d at the end", f.tb.Waiters(), f.tb.ActiveKeys())
			}
		})
	}
}

// BenchmarkTableSetVsSingle compares, in the table alone, a 2-key set
// acquire+release with a single-key acquire+release, each cycling over a key
// space like the pipelined row (issue #35: a 2-key set pair costs at most
// 1.5× a single-key pair): 2 k keys stay in the idle cache (no entry is
// created or removed), 10 k keys exceed it (every key is trimmed before it
// comes round again, so each op also creates and removes its entries).
// Compare alternating runs of a fixed -benchtime Nx on a loaded machine.
func BenchmarkTableSetVsSingle(b *testing.B) {
	for _, n := range []int{2_000, 10_000} {
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "bench/key/%05d", i)
		}
		b.Run(fmt.Sprintf("single/%d-keys", n), func(b *testing.B) {
			tb := New(Limits{}, NewCounter(first), &SharedCounts{}, &nopSink{})
			o, now, i := own(1, 1), t0, 0
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				k := keys[i%n]
				i++
				if tb.Release(now, o, k, tb.Acquire(now, o, k, 60_000, 0).Token).Status != wire.StatusReleased {
					b.Fatal("release failed")
				}
			}
		})
		b.Run(fmt.Sprintf("set2/%d-keys", n), func(b *testing.B) {
			tb := New(Limits{}, NewCounter(first), &SharedCounts{}, &nopSink{})
			o, now, i := own(1, 1), t0, 0
			set := make([][]byte, 2)
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				set[0], set[1] = keys[i%n], keys[(i+1)%n]
				i += 2
				e := tb.AcquireSet(now, o, set, 60_000, 0)
				if tb.ReleaseSet(now, o, set, e.Token).Status != wire.StatusReleased {
					b.Fatal("set release failed")
				}
			}
		})
	}
}

// TestSetAcquireReleaseNoAlloc (issue 35): a 2-key set acquire+release on
// free keys allocates nothing once the table is warm (held sets are recycled
// structs naming entries: no key strings, no record per set).
func TestSetAcquireReleaseNoAlloc(t *testing.T) {
	tb := New(Limits{}, NewCounter(first), &SharedCounts{}, &nopSink{})
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "set/key/%02d", i)
	}
	o, now, i := own(1, 1), t0, 0
	set := make([][]byte, 2)
	op := func() {
		now += 1000
		set[0], set[1] = keys[i%len(keys)], keys[(i+1)%len(keys)]
		i += 2
		e := tb.AcquireSet(now, o, set, 60_000, 0)
		if e.Status != wire.StatusGranted || tb.ReleaseSet(now, o, set, e.Token).Status != wire.StatusReleased {
			t.Fatal("set acquire+release failed")
		}
	}
	for range 200 {
		op() // warm: entries, index, lanes, the sets map, one recycled held set
	}
	if n := testing.AllocsPerRun(1000, op); n != 0 {
		t.Fatalf("%v allocations per set acquire+release", n)
	}
}
