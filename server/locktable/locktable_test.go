package locktable

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

const (
	ms   = int64(time.Millisecond)
	t0   = int64(1_000_000) * ms // an arbitrary monotonic epoch
	unix = int64(1_700_000_000_000)
)

var first = FirstToken(unix)

// recSink records Sink deliveries.
type recSink struct{ got []Effect }

func (s *recSink) Deliver(e Effect) { s.got = append(s.got, e) }

func (s *recSink) take() []Effect {
	g := s.got
	s.got = nil
	return g
}

func own(conn uint64, req uint32) Owner { return Owner{Conn: conn, ReqID: req} }

func effG(o Owner, tok uint64, queued uint16) Effect {
	return Effect{Owner: o, Status: wire.StatusGranted, Token: tok, Queued: queued}
}
func effT(o Owner) Effect { return Effect{Owner: o, Status: wire.StatusTimeout} }
func effB(o Owner, c wire.Code) Effect {
	return Effect{Owner: o, Status: wire.StatusBusy, Code: c}
}
func effO(o Owner) Effect { return Effect{Owner: o, Status: wire.StatusReleased} }
func effN(o Owner) Effect { return Effect{Owner: o, Status: wire.StatusNotHolder} }
func effQ(o Owner) Effect { return Effect{Owner: o, Status: Queued} }

type fx struct {
	t      testing.TB
	tb     *Table
	sink   *recSink
	counts *SharedCounts
	tok    *Counter
}

func newFx(t testing.TB, l Limits) *fx {
	f := &fx{t: t, sink: &recSink{}, counts: &SharedCounts{}, tok: NewCounter(first)}
	f.tb = New(l, f.tok, f.counts, f.sink)
	t.Cleanup(f.check)
	return f
}

func (f *fx) check() {
	f.t.Helper()
	if err := f.tb.CheckInvariants(); err != nil {
		f.t.Fatalf("invariants: %v", err)
	}
	if got, want := f.counts.Keys(), int64(f.tb.ActiveKeys()); got != want {
		f.t.Fatalf("shared Keys() = %d, table ActiveKeys = %d", got, want)
	}
	if got, want := f.counts.Waiters(), int64(f.tb.Waiters()); got != want {
		f.t.Fatalf("shared Waiters() = %d, table Waiters = %d", got, want)
	}
}

func (f *fx) acq(now int64, o Owner, key string, leaseMS, waitMS uint32, want Effect) {
	f.t.Helper()
	if got := f.tb.Acquire(now, o, []byte(key), leaseMS, waitMS); got != want {
		f.t.Fatalf("Acquire(%v, %q, lease %d, wait %d) = %+v, want %+v", o, key, leaseMS, waitMS, got, want)
	}
	f.check()
}

func (f *fx) rel(now int64, o Owner, key string, tok uint64, want Effect) {
	f.t.Helper()
	if got := f.tb.Release(now, o, []byte(key), tok); got != want {
		f.t.Fatalf("Release(%v, %q, %d) = %+v, want %+v", o, key, tok, got, want)
	}
	f.check()
}

func (f *fx) cancel(now int64, o Owner, key string, target uint32, want Effect) {
	f.t.Helper()
	if got := f.tb.Cancel(now, o, []byte(key), target); got != want {
		f.t.Fatalf("Cancel(%v, %q, %d) = %+v, want %+v", o, key, target, got, want)
	}
	f.check()
}

func (f *fx) advance(now int64, wantN int) {
	f.t.Helper()
	if n := f.tb.Advance(now); n != wantN {
		f.t.Fatalf("Advance(%d) applied %d, want %d", now-t0, n, wantN)
	}
	f.check()
}

// delivered asserts the Sink got exactly want since the last call.
func (f *fx) delivered(want ...Effect) {
	f.t.Helper()
	got := f.sink.take()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		f.t.Fatalf("deliveries:\n got %+v\nwant %+v", got, want)
	}
}

func (f *fx) holder(key string, wantTok uint64, wantDeadline int64) {
	f.t.Helper()
	tok, dl, ok := f.tb.Holder(key)
	if wantTok == 0 {
		if ok {
			f.t.Fatalf("key %q held by %d, want free", key, tok)
		}
		return
	}
	if !ok || tok != wantTok || dl != wantDeadline {
		f.t.Fatalf("Holder(%q) = %d, %d, %v; want %d, %d", key, tok, dl-t0, ok, wantTok, wantDeadline-t0)
	}
}

func (f *fx) queue(key string, want ...Owner) {
	f.t.Helper()
	if got := f.tb.QueueOf(key); !slices.Equal(got, want) {
		f.t.Fatalf("QueueOf(%q) = %v, want %v", key, got, want)
	}
}

func (f *fx) counters(want Counters) {
	f.t.Helper()
	if got := f.tb.Counters(); got != want {
		f.t.Fatalf("Counters = %+v, want %+v", got, want)
	}
}

// ---------------------------------------------------------------------------
// §5 request × key state matrix

func TestMatrix(t *testing.T) {
	const key = "k"
	var (
		H = own(1, 1) // holder
		W = own(2, 1) // waiter (held+queued)
		R = own(3, 7) // the request under test
	)
	// setups: the state the key is in before the request, at t0; the
	// request runs at t0+40ms.
	type state int
	const (
		free state = iota
		held
		heldQueued
	)
	setup := func(t *testing.T, s state) *fx {
		f := newFx(t, Limits{})
		if s >= held {
			f.acq(t0, H, key, 1000, 0, effG(H, first, 0))
		}
		if s >= heldQueued {
			f.acq(t0, W, key, 500, 1000, effQ(W))
		}
		return f
	}
	now := t0 + 40*ms
	type after struct {
		holder   uint64 // 0 = free
		deadline int64
		queue    []Owner
		deliv    []Effect
	}
	cases := []struct {
		name  string
		state state
		op    func(f *fx) Effect
		want  Effect
		after after
	}{
		// acquire, wait 0
		{"acquire wait0 free", free, func(f *fx) Effect { return f.tb.Acquire(now, R, []byte(key), 300, 0) },
			effG(R, first, 0), after{holder: first, deadline: now + 300*ms}},
		{"acquire wait0 held", held, func(f *fx) Effect { return f.tb.Acquire(now, R, []byte(key), 300, 0) },
			effT(R), after{holder: first, deadline: t0 + 1000*ms}},
		{"acquire wait0 held+queued", heldQueued, func(f *fx) Effect { return f.tb.Acquire(now, R, []byte(key), 300, 0) },
			effT(R), after{holder: first, deadline: t0 + 1000*ms, queue: []Owner{W}}},
		// acquire, wait > 0
		{"acquire wait free", free, func(f *fx) Effect { return f.tb.Acquire(now, R, []byte(key), 300, 50) },
			effG(R, first, 0), after{holder: first, deadline: now + 300*ms}},
		{"acquire wait held", held, func(f *fx) Effect { return f.tb.Acquire(now, R, []byte(key), 300, 50) },
			effQ(R), after{holder: first, deadline: t0 + 1000*ms, queue: []Owner{R}}},
		{"acquire wait held+queued", heldQueued, func(f *fx) Effect { return f.tb.Acquire(now, R, []byte(key), 300, 50) },
			effQ(R), after{holder: first, deadline: t0 + 1000*ms, queue: []Owner{W, R}}},
		// release, token = holder's
		{"release holder held", held, func(f *fx) Effect { return f.tb.Release(now, R, []byte(key), first) },
			effO(R), after{}},
		{"release holder held+queued (handoff)", heldQueued, func(f *fx) Effect { return f.tb.Release(now, R, []byte(key), first) },
			effO(R), after{holder: first + 1, deadline: now + 500*ms,
				deliv: []Effect{effG(W, first+1, 2)}}}, // 40 ms / 16 ms = 2
		// release, other token
		{"release free", free, func(f *fx) Effect { return f.tb.Release(now, R, []byte(key), first) },
			effN(R), after{}},
		{"release token 0 free", free, func(f *fx) Effect { return f.tb.Release(now, R, []byte(key), 0) },
			effN(R), after{}},
		{"release other token held", held, func(f *fx) Effect { return f.tb.Release(now, R, []byte(key), first+1) },
			effN(R), after{holder: first, deadline: t0 + 1000*ms}},
		{"release token 0 held", held, func(f *fx) Effect { return f.tb.Release(now, R, []byte(key), 0) },
			effN(R), after{holder: first, deadline: t0 + 1000*ms}},
		{"release holder token wrong key", held, func(f *fx) Effect { return f.tb.Release(now, R, []byte("other"), first) },
			effN(R), after{holder: first, deadline: t0 + 1000*ms}},
		{"release other token held+queued", heldQueued, func(f *fx) Effect { return f.tb.Release(now, R, []byte(key), first-1) },
			effN(R), after{holder: first, deadline: t0 + 1000*ms, queue: []Owner{W}}},
		// cancel, own queued acquire
		{"cancel own queued", heldQueued, func(f *fx) Effect { return f.tb.Cancel(now, own(W.Conn, 9), []byte(key), W.ReqID) },
			effO(own(W.Conn, 9)), after{holder: first, deadline: t0 + 1000*ms, deliv: []Effect{effT(W)}}},
		// cancel, anything else
		{"cancel free", free, func(f *fx) Effect { return f.tb.Cancel(now, own(W.Conn, 9), []byte(key), W.ReqID) },
			effN(own(W.Conn, 9)), after{}},
		{"cancel held", held, func(f *fx) Effect { return f.tb.Cancel(now, own(W.Conn, 9), []byte(key), W.ReqID) },
			effN(own(W.Conn, 9)), after{holder: first, deadline: t0 + 1000*ms}},
		{"cancel holder's own acquire", held, func(f *fx) Effect { return f.tb.Cancel(now, own(H.Conn, 9), []byte(key), H.ReqID) },
			effN(own(H.Conn, 9)), after{holder: first, deadline: t0 + 1000*ms}},
		{"cancel wrong key", heldQueued, func(f *fx) Effect { return f.tb.Cancel(now, own(W.Conn, 9), []byte("k2"), W.ReqID) },
			effN(own(W.Conn, 9)), after{holder: first, deadline: t0 + 1000*ms, queue: []Owner{W}}},
		{"cancel wrong req_id", heldQueued, func(f *fx) Effect { return f.tb.Cancel(now, own(W.Conn, 9), []byte(key), W.ReqID+1) },
			effN(own(W.Conn, 9)), after{holder: first, deadline: t0 + 1000*ms, queue: []Owner{W}}},
		{"cancel other connection", heldQueued, func(f *fx) Effect { return f.tb.Cancel(now, own(R.Conn, 9), []byte(key), W.ReqID) },
			effN(own(R.Conn, 9)), after{holder: first, deadline: t0 + 1000*ms, queue: []Owner{W}}},
		{"cancel already granted", heldQueued, func(f *fx) Effect {
			if e := f.tb.Release(now, H, []byte(key), first); e != effO(H) {
				t.Fatalf("release: %+v", e)
			}
			return f.tb.Cancel(now, own(W.Conn, 9), []byte(key), W.ReqID)
		}, effN(own(W.Conn, 9)), after{holder: first + 1, deadline: now + 500*ms, deliv: []Effect{effG(W, first+1, 2)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t, c.state)
			f.delivered()
			if got := c.op(f); got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			f.check()
			f.delivered(c.after.deliv...)
			f.holder(key, c.after.holder, c.after.deadline)
			f.queue(key, c.after.queue...)
		})
	}
}

// The §5 event table: lease expiry, wait elapsing, close, drain.
func TestEvents(t *testing.T) {
	const key = "k"
	H, A, B := own(1, 1), own(2, 1), own(3, 1)

	t.Run("lease expiry held", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, key, 100, 0, effG(H, first, 0))
		if dl, ok := f.tb.NextDeadline(); !ok || dl != t0+100*ms {
			t.Fatalf("NextDeadline = %d, %v", dl-t0, ok)
		}
		f.advance(t0+100*ms-1, 0)
		f.holder(key, first, t0+100*ms)
		f.advance(t0+100*ms, 1) // a lease ends once lease_ms has fully elapsed
		f.holder(key, 0, 0)
		f.delivered()
		if _, ok := f.tb.NextDeadline(); ok {
			t.Fatal("a deadline is still armed")
		}
		f.rel(t0+101*ms, H, key, first, effN(H)) // the old token no longer releases
		f.counters(Counters{Grants: 1, Expiries: 1, NotHolder: 1})
	})

	t.Run("lease expiry held+queued hands off", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, key, 100, 0, effG(H, first, 0))
		f.acq(t0+10*ms, A, key, 70, 1000, effQ(A))
		f.advance(t0+100*ms, 1)
		f.delivered(effG(A, first+1, 5))  // waited 90 ms = 5 units
		f.holder(key, first+1, t0+170*ms) // lease counted from the handoff
		f.advance(t0+170*ms, 1)
		f.holder(key, 0, 0)
		f.counters(Counters{Grants: 2, Handoffs: 1, Expiries: 2})
	})

	t.Run("wait elapses", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, key, 1000, 0, effG(H, first, 0))
		f.acq(t0, A, key, 100, 50, effQ(A))
		f.acq(t0, B, key, 100, 80, effQ(B))
		f.advance(t0+50*ms-1, 0)
		f.advance(t0+50*ms, 1)
		f.delivered(effT(A))
		f.queue(key, B)
		f.advance(t0+90*ms, 1)
		f.delivered(effT(B))
		f.queue(key)
		f.holder(key, first, t0+1000*ms)
		if f.tb.Outstanding(A) || f.tb.Outstanding(B) {
			t.Fatal("timed-out waiters still outstanding")
		}
		f.counters(Counters{Grants: 1, Timeouts: 2})
	})

	t.Run("elapsed waiter never granted by a release before Advance", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, key, 1000, 0, effG(H, first, 0))
		f.acq(t0, A, key, 100, 50, effQ(A))   // wait ends at t0+50
		f.acq(t0, B, key, 100, 1000, effQ(B)) // still waiting
		// t0+50ms: A's wait has elapsed (exactly) but its timer was not processed
		f.rel(t0+50*ms, H, key, first, effO(H))
		f.delivered(effT(A), effG(B, first+1, 3))
		f.holder(key, first+1, t0+150*ms)
		f.advance(t0+60*ms, 0) // A's timer is gone: no second answer
		f.delivered()
		f.counters(Counters{Grants: 2, Handoffs: 1, Timeouts: 1, Releases: 1})
	})

	t.Run("elapsed sole waiter: release frees the key", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, key, 1000, 0, effG(H, first, 0))
		f.acq(t0, A, key, 100, 50, effQ(A))
		f.rel(t0+70*ms, H, key, first, effO(H))
		f.delivered(effT(A))
		f.holder(key, 0, 0)
		if f.tb.ActiveKeys() != 0 {
			t.Fatal("key still active")
		}
	})

	t.Run("late Advance: expiry processed at now skips elapsed waiters", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, key, 50, 0, effG(H, first, 0))
		f.acq(t0, A, key, 10, 100, effQ(A))
		f.acq(t0, B, key, 10, 300, effQ(B))
		// lease due at 50, A's wait at 100, B's at 300: all processed at 200
		f.advance(t0+200*ms, 1) // one timer (the lease) applied; it also answered A
		f.delivered(effT(A), effG(B, first+1, 12))
		f.holder(key, first+1, t0+210*ms)
	})

	t.Run("equal deadlines fire in arming order", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, key, 1000, 0, effG(H, first, 0))
		for i := range uint32(5) {
			f.acq(t0, own(10+uint64(i), i), key, 10, 100, effQ(own(10+uint64(i), i)))
		}
		f.acq(t0, H, "x", 100, 0, effG(H, first+1, 0)) // a lease due at the same instant
		f.advance(t0+100*ms, 6)
		want := []Effect{}
		for i := range uint32(5) {
			want = append(want, effT(own(10+uint64(i), i)))
		}
		f.delivered(want...)
		f.holder("x", 0, 0)
	})

	t.Run("connection closes", func(t *testing.T) {
		f := newFx(t, Limits{})
		C := uint64(7)
		f.acq(t0, own(C, 1), "mine", 1000, 0, effG(own(C, 1), first, 0))
		f.acq(t0, H, "a", 1000, 0, effG(H, first+1, 0))
		f.acq(t0, H, "b", 1000, 0, effG(H, first+2, 0))
		f.acq(t0, A, "a", 100, 500, effQ(A))
		f.acq(t0, own(C, 2), "a", 100, 500, effQ(own(C, 2)))
		f.acq(t0, own(C, 3), "b", 100, 500, effQ(own(C, 3)))
		f.acq(t0, own(C, 4), "a", 100, 500, effQ(own(C, 4)))
		f.acq(t0, B, "a", 100, 500, effQ(B))
		if n := f.tb.DropConn(C); n != 3 {
			t.Fatalf("DropConn = %d, want 3", n)
		}
		f.check()
		f.delivered() // silently
		f.queue("a", A, B)
		f.queue("b")
		f.holder("mine", first, t0+1000*ms) // its lock stays held
		for _, r := range []uint32{2, 3, 4} {
			if f.tb.Outstanding(own(C, r)) {
				t.Fatalf("req %d still outstanding", r)
			}
		}
		if f.tb.Waiters() != 2 || f.counts.Waiters() != 2 {
			t.Fatalf("Waiters = %d/%d, want 2", f.tb.Waiters(), f.counts.Waiters())
		}
		if n := f.tb.DropConn(C); n != 0 {
			t.Fatalf("second DropConn = %d", n)
		}
		// its lock is released by token from any connection; the queue skips the dropped
		f.rel(t0+16*ms, A, "mine", first, effO(A))
		f.rel(t0+16*ms, H, "a", first+1, effO(H))
		f.delivered(effG(A, first+3, 1))
		f.rel(t0+16*ms, H, "b", first+2, effO(H))
		f.holder("b", 0, 0)
		// A's lease expires (processed at now, B's wait has elapsed too: T);
		// nothing for the dropped waiters
		f.advance(t0+10_000*ms, 1)
		f.delivered(effT(B))
		f.counters(Counters{Grants: 4, Handoffs: 1, Releases: 3, Expiries: 1, Timeouts: 1})
	})

	t.Run("drain", func(t *testing.T) {
		f := newFx(t, Limits{})
		f.acq(t0, H, "a", 1000, 0, effG(H, first, 0))
		f.acq(t0, H, "b", 1000, 0, effG(H, first+1, 0))
		order := []struct {
			o   Owner
			key string
		}{{A, "a"}, {own(4, 4), "b"}, {B, "a"}, {own(5, 5), "b"}, {own(2, 9), "b"}}
		for i := range uint32(12) { // enough waiters that map order would show
			order = append(order, struct {
				o   Owner
				key string
			}{own(20+uint64(i%4), 50+i), []string{"b", "a"}[i%2]})
		}
		for _, x := range order {
			f.acq(t0, x.o, x.key, 10, 500, effQ(x.o))
		}
		if n := f.tb.DrainWaiters(); n != len(order) {
			t.Fatalf("DrainWaiters = %d", n)
		}
		f.check()
		var want []Effect
		for _, x := range order { // every waiter, in arrival order
			want = append(want, effB(x.o, wire.CodeShuttingDown))
		}
		f.delivered(want...)
		f.queue("a")
		f.queue("b")
		f.holder("a", first, t0+1000*ms)
		f.holder("b", first+1, t0+1000*ms)
		if f.tb.Waiters() != 0 || f.counts.Waiters() != 0 {
			t.Fatal("waiters left")
		}
		f.counters(Counters{Grants: 2, Busy: uint64(len(order))})
		f.advance(t0+1000*ms, 2)
		f.delivered()
	})
}

func TestQueuedField(t *testing.T) {
	for _, c := range []struct {
		waited time.Duration
		want   uint16
	}{
		{0, 0}, {time.Millisecond, 0}, {16*time.Millisecond - 1, 0}, {16 * time.Millisecond, 1},
		{time.Second, 62}, {15 * time.Minute, 56250},
		{65535*16*time.Millisecond - 1, 65534}, {65535 * 16 * time.Millisecond, 65535},
		{70 * time.Minute, 65535},
	} {
		f := newFx(t, Limits{})
		H, W := own(1, 1), own(2, 2)
		f.acq(t0, H, "k", 4_294_967_295, 0, effG(H, first, 0))
		f.acq(t0, W, "k", 1, 4_294_967_295, effQ(W))
		now := t0 + int64(c.waited)
		f.rel(now, H, "k", first, effO(H))
		f.delivered(effG(W, first+1, c.want))
		if got := wire.QueuedUnits(c.waited); got != c.want {
			t.Fatalf("QueuedUnits(%v) = %d, want %d", c.waited, got, c.want)
		}
	}
	if wire.QueuedUnits(-5) != 0 {
		t.Fatal("negative wait")
	}
}

func TestLimits(t *testing.T) {
	t.Run("MaxKeys", func(t *testing.T) {
		f := newFx(t, Limits{MaxKeys: 2})
		H := own(1, 1)
		f.acq(t0, H, "a", 100, 0, effG(H, first, 0))
		f.acq(t0, H, "b", 100, 0, effG(H, first+1, 0))
		f.acq(t0, H, "c", 100, 0, effB(H, wire.CodeOverloaded))
		f.acq(t0, H, "c", 100, 100, effB(H, wire.CodeOverloaded))
		f.acq(t0, own(2, 1), "a", 100, 100, effQ(own(2, 1))) // queuing on an active key adds no key
		f.rel(t0, H, "b", first+1, effO(H))
		f.acq(t0, H, "c", 100, 0, effG(H, first+2, 0))
		f.acq(t0, H, "b", 100, 0, effB(H, wire.CodeOverloaded)) // an idle cached key counts when reactivated
		f.counters(Counters{Grants: 3, Releases: 1, Busy: 3})
	})
	t.Run("MaxKeys shared across tables", func(t *testing.T) {
		counts, tok, sink := &SharedCounts{}, NewCounter(first), &recSink{}
		t1 := New(Limits{MaxKeys: 1}, tok, counts, sink)
		t2 := New(Limits{MaxKeys: 1}, tok, counts, sink)
		if e := t1.Acquire(t0, own(1, 1), []byte("a"), 10, 0); e.Status != wire.StatusGranted {
			t.Fatal(e)
		}
		if e := t2.Acquire(t0, own(1, 2), []byte("b"), 10, 0); e != effB(own(1, 2), wire.CodeOverloaded) {
			t.Fatal(e)
		}
	})
	t.Run("MaxWaiters", func(t *testing.T) {
		f := newFx(t, Limits{MaxWaiters: 2})
		H := own(1, 1)
		f.acq(t0, H, "a", 100, 0, effG(H, first, 0))
		f.acq(t0, H, "b", 100, 0, effG(H, first+1, 0))
		f.acq(t0, own(2, 1), "a", 100, 50, effQ(own(2, 1)))
		f.acq(t0, own(2, 2), "b", 100, 50, effQ(own(2, 2)))
		f.acq(t0, own(2, 3), "a", 100, 50, effB(own(2, 3), wire.CodeOverloaded))
		f.acq(t0, own(2, 4), "a", 100, 0, effT(own(2, 4)))              // wait 0 never counts
		f.acq(t0, own(2, 5), "c", 100, 50, effG(own(2, 5), first+2, 0)) // nor a free key
		f.cancel(t0, own(2, 6), "a", 1, effO(own(2, 6)))
		f.delivered(effT(own(2, 1)))
		f.acq(t0, own(2, 7), "a", 100, 50, effQ(own(2, 7)))
		f.counters(Counters{Grants: 3, Busy: 1, Timeouts: 2, Cancels: 1})
	})
	t.Run("MaxWaitersPerKey", func(t *testing.T) {
		f := newFx(t, Limits{MaxWaitersPerKey: 2})
		H := own(1, 1)
		f.acq(t0, H, "a", 100, 0, effG(H, first, 0))
		f.acq(t0, H, "b", 100, 0, effG(H, first+1, 0))
		f.acq(t0, own(2, 1), "a", 100, 50, effQ(own(2, 1)))
		f.acq(t0, own(2, 2), "a", 100, 50, effQ(own(2, 2)))
		f.acq(t0, own(2, 3), "a", 100, 50, effB(own(2, 3), wire.CodeQueueFull))
		f.acq(t0, own(2, 4), "b", 100, 50, effQ(own(2, 4))) // another key's queue is separate
		f.advance(t0+50*ms, 3)
		f.delivered(effT(own(2, 1)), effT(own(2, 2)), effT(own(2, 4)))
		f.acq(t0+50*ms, own(2, 5), "a", 100, 50, effQ(own(2, 5)))
		f.counters(Counters{Grants: 2, Busy: 1, Timeouts: 3})
	})
	t.Run("QUEUE_FULL before OVERLOADED", func(t *testing.T) {
		f := newFx(t, Limits{MaxWaitersPerKey: 1, MaxWaiters: 1})
		H := own(1, 1)
		f.acq(t0, H, "a", 100, 0, effG(H, first, 0))
		f.acq(t0, own(2, 1), "a", 100, 50, effQ(own(2, 1)))
		f.acq(t0, own(2, 2), "a", 100, 50, effB(own(2, 2), wire.CodeQueueFull))
	})
}

func TestNotReentrant(t *testing.T) {
	f := newFx(t, Limits{})
	f.acq(t0, own(1, 1), "k", 100, 0, effG(own(1, 1), first, 0))
	f.acq(t0, own(1, 2), "k", 100, 0, effT(own(1, 2)))
	f.acq(t0, own(1, 3), "k", 100, 500, effQ(own(1, 3)))
	f.queue("k", own(1, 3))
	f.rel(t0+32*ms, own(1, 4), "k", first, effO(own(1, 4)))
	f.delivered(effG(own(1, 3), first+1, 2))
}

func TestFIFOAndTokens(t *testing.T) {
	f := newFx(t, Limits{})
	H := own(1, 1)
	f.acq(t0, H, "k", 100, 0, effG(H, first, 0))
	var ws []Owner
	for i := range uint32(7) {
		w := own(uint64(10+i%3), 100+i) // some share a connection
		ws = append(ws, w)
		f.acq(t0+int64(i)*ms, w, "k", 100, 10_000, effQ(w))
	}
	// interleave other keys so the token sequence is shared
	f.acq(t0, H, "other", 100, 0, effG(H, first+1, 0))
	f.queue("k", ws...)
	tok, last := first, first+1
	now := t0
	for i, w := range ws {
		now += 20 * ms
		if i%2 == 0 {
			f.rel(now, H, "k", tok, effO(H))
		} else {
			f.tb.Expire(now, []byte("k"), tok)
			f.check()
		}
		d := f.sink.take()
		if len(d) != 1 || d[0].Owner != w || d[0].Status != wire.StatusGranted {
			t.Fatalf("handoff %d: %+v, want G to %v", i, d, w)
		}
		if d[0].Token <= last {
			t.Fatalf("handoff %d: token %d not above %d", i, d[0].Token, last)
		}
		last, tok = d[0].Token, d[0].Token
		f.queue("k", ws[i+1:]...)
	}
	f.rel(now, H, "k", tok, effO(H))
	f.holder("k", 0, 0)
	f.counters(Counters{Grants: 9, Handoffs: 7, Releases: 5, Expiries: 3})
}

func TestIdleCache(t *testing.T) {
	t.Run("reuse", func(t *testing.T) {
		f := newFx(t, Limits{})
		H := own(1, 1)
		f.acq(t0, H, "k", 100, 0, effG(H, first, 0))
		st := f.tb.findString("k")
		f.rel(t0, H, "k", first, effO(H))
		if f.tb.findString("k") != st || f.tb.idle.n != 1 || f.tb.idle.head != st || f.tb.ActiveKeys() != 0 || f.counts.Keys() != 0 {
			t.Fatal("released key not kept idle")
		}
		f.acq(t0, H, "k", 100, 0, effG(H, first+1, 0))
		if f.tb.findString("k") != st || f.tb.idle.n != 0 {
			t.Fatal("re-acquire did not reuse the idle entry")
		}
		key := []byte("k")
		tok := first + 1
		allocs := testing.AllocsPerRun(100, func() {
			f.tb.Release(t0, H, key, tok)
			tok++
			f.tb.Acquire(t0, H, key, 100, 0)
		})
		if allocs != 0 {
			t.Fatalf("re-acquire of an idle key allocates %.1f times", allocs)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		f := newFx(t, Limits{IdleCache: 3})
		H := own(1, 1)
		for i := range 10 {
			k := fmt.Sprint("k", i)
			f.acq(t0, H, k, 100, 0, effG(H, first+uint64(i), 0))
			f.rel(t0, H, k, first+uint64(i), effO(H))
			if f.tb.n > 3 {
				t.Fatalf("%d key entries kept, IdleCache 3", f.tb.n)
			}
		}
		for _, k := range []string{"k7", "k8", "k9"} { // the newest are kept
			if st := f.tb.findString(k); st == noEntry || f.tb.ent(st).token != 0 {
				t.Fatalf("%s not in the idle cache", k)
			}
		}
		// a burst of active keys: afterwards entries and free lists fall back
		for i := range 100 {
			f.acq(t0, H, fmt.Sprint("b", i), 100, 0, effG(H, first+10+uint64(i), 0))
		}
		f.advance(t0+100*ms, 100)
		if f.tb.n != 3 || len(f.tb.pages) > 1 || len(f.tb.slots) > 64 {
			t.Fatalf("after a burst: %d entries, %d pages, %d index slots", f.tb.n, len(f.tb.pages), len(f.tb.slots))
		}
	})
	t.Run("none", func(t *testing.T) {
		f := newFx(t, Limits{IdleCache: -1}) // used to panic on the first release
		H := own(1, 1)
		f.acq(t0, H, "k", 100, 0, effG(H, first, 0))
		f.acq(t0, own(2, 2), "k", 100, 100, effQ(own(2, 2)))
		f.rel(t0, H, "k", first, effO(H))
		f.delivered(effG(own(2, 2), first+1, 0))
		f.rel(t0, H, "k", first+1, effO(H))
		if f.tb.n != 0 {
			t.Fatalf("%d entries kept with no idle cache", f.tb.n)
		}
		f.acq(t0, H, "k", 100, 0, effG(H, first+2, 0))
	})
}

func TestStaleExpireAndWaitTimeout(t *testing.T) {
	f := newFx(t, Limits{})
	H, A := own(1, 1), own(2, 1)
	f.acq(t0, H, "k", 100, 0, effG(H, first, 0))
	f.acq(t0, A, "k", 100, 500, effQ(A))
	if f.tb.Expire(t0, []byte("k"), first+5) || f.tb.Expire(t0, []byte("nope"), first) || f.tb.Expire(t0, []byte("k"), 0) {
		t.Fatal("stale Expire changed something")
	}
	if f.tb.WaitTimeout(own(2, 2)) || f.tb.WaitTimeout(own(3, 1)) {
		t.Fatal("stale WaitTimeout changed something")
	}
	f.check()
	f.delivered()
	f.holder("k", first, t0+100*ms)
	f.queue("k", A)
	f.counters(Counters{Grants: 1})

	if !f.tb.Expire(t0+10*ms, []byte("k"), first) {
		t.Fatal("Expire with the holder's token refused")
	}
	f.check()
	f.delivered(effG(A, first+1, 0))
	if f.tb.Expire(t0+10*ms, []byte("k"), first) {
		t.Fatal("second Expire with the old token applied")
	}
	f.acq(t0+10*ms, own(3, 1), "k", 100, 500, effQ(own(3, 1)))
	if !f.tb.WaitTimeout(own(3, 1)) {
		t.Fatal("WaitTimeout of a queued owner refused")
	}
	f.check()
	f.delivered(effT(own(3, 1)))
	if f.tb.WaitTimeout(own(3, 1)) {
		t.Fatal("second WaitTimeout applied")
	}
	f.advance(t0+10_000*ms, 1) // only A's lease remains armed
	f.delivered()
	f.counters(Counters{Grants: 2, Handoffs: 1, Expiries: 2, Timeouts: 1})
}

func TestLocksInfo(t *testing.T) {
	f := newFx(t, Limits{})
	H := own(1, 1)
	f.acq(t0, H, "app/a", 1000, 0, effG(H, first, 0))
	f.acq(t0, H, "app/b", 300, 0, effG(H, first+1, 0))
	f.acq(t0, H, "zzz", 300, 0, effG(H, first+2, 0))
	f.acq(t0, H, "idle", 300, 0, effG(H, first+3, 0))
	f.rel(t0, H, "idle", first+3, effO(H))
	f.acq(t0+100*ms, own(2, 1), "app/a", 10, 5000, effQ(own(2, 1)))
	f.acq(t0+200*ms, own(2, 2), "app/a", 10, 5000, effQ(own(2, 2)))
	got := map[string]LockInfo{}
	f.tb.Locks(t0+250*ms+ms/2, "app/", func(li LockInfo) bool { got[li.Key] = li; return true })
	want := map[string]LockInfo{
		"app/a": {Key: "app/a", Token: first, LeaseRemainingMS: 749, QueueDepth: 2, OldestWaiterAgeMS: 150, HolderConn: 1,
			Waiters: []WaiterInfo{{Conn: 2, WaitedMS: 150}, {Conn: 2, WaitedMS: 50}}},
		"app/b": {Key: "app/b", Token: first + 1, LeaseRemainingMS: 49, HolderConn: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Locks:\n got %+v\nwant %+v", got, want)
	}
	// past its deadline (not yet advanced): remaining 0
	n := 0
	f.tb.Locks(t0+400*ms, "", func(li LockInfo) bool {
		n++
		if li.Key == "app/b" && li.LeaseRemainingMS != 0 {
			t.Fatalf("overdue lease remaining %d", li.LeaseRemainingMS)
		}
		return true
	})
	if n != 3 {
		t.Fatalf("Locks(\"\") saw %d keys, want 3 (idle keys are not listed)", n)
	}
	n = 0
	f.tb.Locks(t0, "", func(LockInfo) bool { n++; return false })
	if n != 1 {
		t.Fatalf("Locks did not stop: %d", n)
	}
	if f.tb.Holders() != 3 || f.tb.ActiveKeys() != 3 || f.tb.Waiters() != 2 {
		t.Fatalf("Holders %d ActiveKeys %d Waiters %d", f.tb.Holders(), f.tb.ActiveKeys(), f.tb.Waiters())
	}
}

func TestTokens(t *testing.T) {
	if got := FirstToken(unix); got != uint64(unix)*(1<<20) {
		t.Fatalf("FirstToken = %d", got)
	}
	if FirstToken(1) != 1<<20 {
		t.Fatal("FirstToken(1)")
	}
	c := NewCounter(FirstToken(unix))
	if c.Last() != FirstToken(unix)-1 {
		t.Fatal("Last before any")
	}
	if c.Next() != FirstToken(unix) || c.Next() != FirstToken(unix)+1 || c.Last() != FirstToken(unix)+1 {
		t.Fatal("Counter sequence")
	}
	if z := NewCounter(0); z.Next() != 1 {
		t.Fatal("NewCounter(0) issued token 0")
	}
	// the table's first grant carries the domain's first token
	f := newFx(t, Limits{})
	f.acq(t0, own(1, 1), "k", 10, 0, effG(own(1, 1), FirstToken(unix), 0))
}

func TestCounters(t *testing.T) {
	f := newFx(t, Limits{MaxWaitersPerKey: 1})
	H := own(1, 1)
	f.acq(t0, H, "a", 100, 0, effG(H, first, 0))                            // Grants 1
	f.acq(t0, own(2, 1), "a", 100, 0, effT(own(2, 1)))                      // Timeouts 1
	f.acq(t0, own(2, 2), "a", 100, 50, effQ(own(2, 2)))                     // queued
	f.acq(t0, own(2, 3), "a", 100, 50, effB(own(2, 3), wire.CodeQueueFull)) // Busy 1
	f.rel(t0, H, "a", first+9, effN(H))                                     // NotHolder 1
	f.rel(t0, H, "b", first, effN(H))                                       // NotHolder 2
	f.cancel(t0, own(2, 9), "a", 99, effN(own(2, 9)))                       // NotHolder 3
	f.rel(t0, H, "a", first, effO(H))                                       // Releases 1, Grants 2, Handoffs 1
	f.delivered(effG(own(2, 2), first+1, 0))
	f.acq(t0, own(3, 1), "a", 100, 50, effQ(own(3, 1)))
	f.cancel(t0, own(3, 2), "a", 1, effO(own(3, 2))) // Cancels 1, Timeouts 2
	f.delivered(effT(own(3, 1)))
	f.acq(t0, own(3, 3), "a", 100, 50, effQ(own(3, 3)))
	f.advance(t0+50*ms, 1) // Timeouts 3
	f.delivered(effT(own(3, 3)))
	f.acq(t0+50*ms, own(3, 4), "a", 100, 500, effQ(own(3, 4)))
	f.advance(t0+100*ms, 1) // Expiries 1, Grants 3, Handoffs 2
	f.delivered(effG(own(3, 4), first+2, 3))
	f.acq(t0+100*ms, own(3, 5), "a", 100, 500, effQ(own(3, 5)))
	f.tb.DrainWaiters() // Busy 2
	f.delivered(effB(own(3, 5), wire.CodeShuttingDown))
	f.acq(t0+100*ms, own(4, 1), "a", 100, 500, effQ(own(4, 1)))
	f.tb.DropConn(4)        // counts nothing
	f.advance(t0+200*ms, 1) // Expiries 2
	f.counters(Counters{Grants: 3, Handoffs: 2, Timeouts: 3, Releases: 1, NotHolder: 3, Expiries: 2, Busy: 2, Cancels: 1})

	var sum Counters
	sum.Add(f.tb.Counters())
	sum.Add(Counters{Grants: 1, Handoffs: 1, Timeouts: 1, Releases: 1, NotHolder: 1, Expiries: 1, Busy: 1, Cancels: 1})
	if sum != (Counters{Grants: 4, Handoffs: 3, Timeouts: 4, Releases: 2, NotHolder: 4, Expiries: 3, Busy: 3, Cancels: 2}) {
		t.Fatalf("Counters.Add: %+v", sum)
	}
}

func TestDuplicateOwner(t *testing.T) {
	f := newFx(t, Limits{})
	H, A := own(1, 1), own(2, 1)
	f.acq(t0, H, "a", 100, 0, effG(H, first, 0))
	f.acq(t0, H, "b", 100, 0, effG(H, first+1, 0))
	f.acq(t0, A, "a", 100, 500, effQ(A))
	if !f.tb.Outstanding(A) {
		t.Fatal("queued acquire not outstanding")
	}
	dup := Effect{Owner: A, Status: wire.StatusError, Code: wire.CodeDuplicateReqID}
	f.acq(t0, A, "b", 100, 500, dup) // would have corrupted the owner index
	f.acq(t0, A, "a", 100, 500, dup)
	f.acq(t0, A, "c", 100, 0, dup)
	f.queue("a", A)
	f.queue("b")
	f.holder("c", 0, 0)
	f.counters(Counters{Grants: 2})
	f.rel(t0, H, "a", first, effO(H))
	f.delivered(effG(A, first+2, 0))
	f.acq(t0, A, "b", 100, 500, effQ(A)) // answered: the req_id may be reused
}

// A randomized exercise of the timers on their own (issue 35: the lanes
// beside the heap): wait timers armed with a few common durations, some with
// the clock going back (out of their lane's order: the heap) and some with
// rare durations (more durations than lanes: the heap), disarmed in random
// order, pop in (deadline, arm order); every place word stays right, lanes
// stay sorted and their tombstones bounded, and wait numbers are reused. The
// heap alone (noLanes) must give the same order.
func TestTimerHeap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		noLanes bool
		durs    int // distinct durations drawn
		back    int // one arm in back goes back in time (0: never)
	}{
		{"heap only", true, 3, 0},
		{"one lane", false, 1, 0},
		{"lanes and heap", false, 3, 7},
		{"more durations than lanes", false, 12, 0},
		{"clock goes back often", false, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := New(Limits{}, NewCounter(first), &SharedCounts{}, &nopSink{})
			tb.noLanes = tc.noLanes
			var live []*timer
			seed := uint64(12345)
			rnd := func(n int) int {
				seed = seed*6364136223846793005 + 1442695040888963407
				return int((seed >> 33) % uint64(n))
			}
			now := int64(1000)
			inLanes := 0
			for range 20000 {
				switch {
				case len(live) == 0 || rnd(3) > 0:
					now += int64(rnd(3))
					enq := now
					if tc.back > 0 && rnd(tc.back) == 0 {
						enq -= int64(rnd(40))
					}
					w := &waiter{enqueued: enq}
					w.wait = timer{at: enq + 100*int64(1+rnd(tc.durs)), w: w}
					tb.arm(&w.wait)
					if w.wait.pos>>laneShift != 0 {
						inLanes++
					}
					live = append(live, &w.wait)
				default:
					// mostly the oldest (a lease released in order), sometimes any
					i := rnd(len(live))
					if rnd(2) == 0 {
						i = rnd(min(len(live), 4))
					}
					tb.disarm(live[i])
					tb.disarm(live[i]) // disarming twice is a no-op
					live = slices.Delete(live, i, i+1)
				}
				if _, waits, err := tb.checkTimers(); err != nil || waits != len(live) {
					t.Fatalf("%v (%d waits armed, %d live)", err, waits, len(live))
				}
			}
			if tc.noLanes != (inLanes == 0) {
				t.Fatalf("%d timers in lanes", inLanes)
			}
			if !tc.noLanes && tc.durs > nLanes && len(tb.timers) == 0 {
				t.Fatal("more durations than lanes, but nothing in the heap")
			}
			if len(tb.waitRefs) > 2*len(live)+64 {
				t.Fatalf("%d wait numbers for %d armed timers", len(tb.waitRefs), len(live))
			}
			var got []*timer
			for {
				x, ok := tb.first()
				if !ok {
					break
				}
				wt := tb.waitRefs[x&^waitBit]
				got = append(got, wt)
				tb.disarm(wt)
			}
			if !slices.IsSortedFunc(got, func(a, b *timer) int {
				if a.at != b.at {
					return int(a.at - b.at)
				}
				return cmpU64(a.seq, b.seq)
			}) || len(got) != len(live) || len(tb.waitRefs) != 0 || tb.armedCount() != 0 {
				t.Fatal("timers do not pop in (deadline, arm order)")
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Benchmarks

type nopSink struct{ n int }

func (s *nopSink) Deliver(Effect) { s.n++ }

func BenchmarkTableAcquireRelease(b *testing.B) {
	tb := New(Limits{}, NewCounter(first), &SharedCounts{}, &nopSink{})
	key, o := []byte("bench/key"), own(1, 1)
	now := t0
	tb.Release(now, o, key, tb.Acquire(now, o, key, 60_000, 0).Token) // the key exists (idle)
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		e := tb.Acquire(now, o, key, 60_000, 0)
		if tb.Release(now, o, key, e.Token).Status != wire.StatusReleased {
			b.Fatal("release failed")
		}
	}
}

func BenchmarkTableHandoff(b *testing.B) {
	sink := &lastSink{}
	tb := New(Limits{}, NewCounter(first), &SharedCounts{}, sink)
	key, h, w := []byte("bench/key"), own(1, 1), own(2, 1)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		e := tb.Acquire(now, h, key, 60_000, 0)                       // G
		if tb.Acquire(now, w, key, 60_000, 10_000).Status != Queued { // queued
			b.Fatal("not queued")
		}
		tb.Release(now, h, key, e.Token) // O + handoff G to w
		tb.Release(now, w, key, sink.last.Token)
	}
}

type lastSink struct{ last Effect }

func (s *lastSink) Deliver(e Effect) { s.last = e }

func BenchmarkTableManyKeys(b *testing.B) {
	const n = 10_000
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("bench/key/%05d", i))
	}
	for _, c := range []struct {
		name  string
		cache int
	}{{"idle-cache-4096", 0}, {"idle-cache-16384", 16384}} {
		b.Run(c.name, func(b *testing.B) {
			tb := New(Limits{IdleCache: c.cache}, NewCounter(first), &SharedCounts{}, &nopSink{})
			o := own(1, 1)
			now := t0
			for _, k := range keys {
				tb.Release(now, o, k, tb.Acquire(now, o, k, 60_000, 0).Token)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				k := keys[i%n]
				i++
				e := tb.Acquire(now, o, k, 60_000, 0)
				tb.Release(now, o, k, e.Token)
			}
		})
	}
}

// BenchmarkTablePipelined is one shard's share of the pipelined row (issue
// 35): the server's 16 shards split 10 k keys (625 each, all in the idle
// cache) and 8 connections × 64 in flight (32 each), so 32 keys are held at
// once; each op acquires a free key and releases the one held longest, 32
// leases staying armed, as in the server.
func BenchmarkTablePipelined(b *testing.B) {
	const n, window = 625, 32
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("bench/key/%05d", i))
	}
	tb := New(Limits{}, NewCounter(first), &SharedCounts{}, &nopSink{})
	o := own(1, 1)
	now := t0
	toks := make([]uint64, n)
	for i := range window {
		toks[i] = tb.Acquire(now, o, keys[i], 30_000, 0).Token
	}
	i := window
	b.ReportAllocs()
	for b.Loop() {
		now += 100
		k := i % n
		toks[k] = tb.Acquire(now, o, keys[k], 30_000, 0).Token
		old := (i - window) % n
		if tb.Release(now, o, keys[old], toks[old]).Status != wire.StatusReleased {
			b.Fatal("release failed")
		}
		i++
	}
}

// TestTimerLanesShiftAndOrder (issue 35): a lease and a wait of the same
// duration share a lane; ShiftLeases moves the lease past the wait, which
// must then fire first (the lanes' items go to the heap, whose order is
// rebuilt). Without moving them, the lane would still fire the lease first.
func TestTimerLanesShiftAndOrder(t *testing.T) {
	f := newFx(t, Limits{})
	H, W, H2 := own(1, 1), own(2, 1), own(3, 1)
	f.acq(t0, H, "a", 1000, 0, effG(H, first, 0))
	f.acq(t0+1*ms, W, "a", 1000, 1000, effQ(W)) // wait due at t0+1001 ms, the same duration
	f.acq(t0+2*ms, H2, "b", 1000, 0, effG(H2, first+1, 0))
	if f.tb.ent(f.tb.findString("a")).hpos>>laneShift == 0 || f.tb.waiters[W].wait.pos>>laneShift == 0 {
		t.Fatal("the lease and the wait are not in a lane")
	}
	f.check()
	f.tb.ShiftLeases(5 * ms) // leases due at t0+1005 and t0+1007 ms now
	f.check()
	if at, ok := f.tb.NextDeadline(); !ok || at != t0+1001*ms {
		t.Fatalf("NextDeadline = %d, %v; want the wait at +1001 ms", at-t0, ok)
	}
	f.advance(t0+1004*ms, 1)
	f.delivered(effT(W))
	f.holder("a", first, t0+1005*ms)
	f.advance(t0+1007*ms, 2)
	f.holder("a", 0, 0)
	f.holder("b", 0, 0)
	// after the shift new arms use the lanes again
	f.acq(t0+2000*ms, H, "c", 1000, 0, effG(H, first+2, 0))
	if f.tb.ent(f.tb.findString("c")).hpos>>laneShift == 0 {
		t.Fatal("a lease armed after ShiftLeases is not in a lane")
	}
}

// TestTimerLanesClockBack (issue 35): the instants a table is given may go
// back (a new cluster leader's clock); a lease due before its lane's last
// goes to another lane or the heap and still fires in deadline order.
func TestTimerLanesClockBack(t *testing.T) {
	f := newFx(t, Limits{})
	H := own(1, 1)
	f.acq(t0+10*ms, H, "a", 100, 0, effG(H, first, 0))   // due +110
	f.acq(t0, H, "b", 100, 0, effG(H, first+1, 0))       // due +100: before a, the clock went back
	f.acq(t0+20*ms, H, "c", 100, 0, effG(H, first+2, 0)) // due +120
	if la, lb := f.tb.ent(f.tb.findString("a")).hpos>>laneShift, f.tb.ent(f.tb.findString("b")).hpos>>laneShift; lb != 0 && lb == la {
		t.Fatal("an out-of-order lease went into the lane of a later one")
	}
	for _, c := range []struct {
		at   int64
		gone string
	}{{100, "b"}, {110, "a"}, {120, "c"}} {
		if at, ok := f.tb.NextDeadline(); !ok || at != t0+c.at*ms {
			t.Fatalf("NextDeadline = %d ms, want %d", (at-t0)/ms, c.at)
		}
		f.advance(t0+c.at*ms, 1)
		f.holder(c.gone, 0, 0)
	}
}

// TestTimerLanesSameAsHeap (issue 35): the timer lanes change no answer. Two
// tables, one with lanes and one with the heap alone, fed the same random
// commands (single keys and sets, leases and waits of a few common and some
// rare durations, releases right and wrong, cancels, Advance at irregular
// instants, the clock going back, ShiftLeases, snapshot and restore into
// fresh tables) give the same effects, the same NextDeadline and the same
// snapshots at every step: what a cluster's replicas need (their FSMs are
// tables fed one log), whichever timer structure holds the deadlines.
func TestTimerLanesSameAsHeap(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			rng := seed * 0x9e3779b97f4a7c15
			rnd := func(n int) int {
				rng = rng*6364136223846793005 + 1442695040888963407
				return int((rng >> 33) % uint64(n))
			}
			type side struct {
				tb   *Table
				sink *recSink
				tok  *Counter
			}
			mk := func(noLanes bool) *side {
				s := &side{sink: &recSink{}, tok: NewCounter(first)}
				s.tb = New(Limits{IdleCache: 4}, s.tok, &SharedCounts{}, s.sink)
				s.tb.noLanes = noLanes
				return s
			}
			sides := []*side{mk(false), mk(true)}
			keys := []string{"a", "b", "c", "d", "e", "f"}
			leases := []uint32{100, 100, 100, 250, 250, 40}
			waits := []uint32{0, 0, 60, 60, 200}
			now, req := t0, uint32(0)
			inLanes := 0
			for step := range 4000 {
				if rnd(10) == 0 {
					now -= int64(rnd(5)) * ms // the clock goes back
				} else {
					now += int64(rnd(15)) * ms
				}
				req++
				o := own(uint64(1+rnd(4)), req)
				lease, wait := leases[rnd(len(leases))], waits[rnd(len(waits))]
				if rnd(8) == 0 {
					lease = uint32(1 + rnd(400)) // a rare duration: the heap, or a lane of its own
				}
				k := keys[rnd(len(keys))]
				k2 := keys[(slices.Index(keys, k)+1+rnd(len(keys)-1))%len(keys)]
				op, wrong, target, shift := rnd(100), rnd(6) == 0, uint32(1+rnd(int(req))), int64(rnd(20))*ms
				var got [2]Effect
				var gotN [2]int
				for j, s := range sides {
					switch {
					case op < 35:
						got[j] = s.tb.Acquire(now, o, []byte(k), lease, wait)
					case op < 45:
						got[j] = s.tb.AcquireSet(now, o, bkeys(k, k2), lease, wait)
					case op < 75:
						tok, _, _ := s.tb.Holder(k)
						if wrong {
							tok++ // a wrong token: N
						}
						if ks := s.tb.SetKeys(tok); ks != nil {
							got[j] = s.tb.ReleaseSet(now, o, bkeys(ks...), tok)
						} else {
							got[j] = s.tb.Release(now, o, []byte(k), tok)
						}
					case op < 80:
						got[j] = s.tb.Cancel(now, o, []byte(k), target)
					case op < 97:
						gotN[j] = s.tb.Advance(now)
					case op < 98:
						s.tb.ShiftLeases(shift)
					default:
						st := s.tb.Snapshot()
						noLanes := s.tb.noLanes
						s.tb = New(Limits{IdleCache: 4}, s.tok, &SharedCounts{}, s.sink)
						s.tb.noLanes = noLanes
						if err := s.tb.Restore(st); err != nil {
							t.Fatalf("step %d: restore: %v", step, err)
						}
					}
					if err := s.tb.CheckInvariants(); err != nil {
						t.Fatalf("step %d, side %d: %v", step, j, err)
					}
				}
				if got[0] != got[1] || gotN[0] != gotN[1] {
					t.Fatalf("step %d (op %d): lanes %+v (%d), heap %+v (%d)", step, op, got[0], gotN[0], got[1], gotN[1])
				}
				if d0, d1 := sides[0].sink.take(), sides[1].sink.take(); !slices.Equal(d0, d1) {
					t.Fatalf("step %d (op %d): delivered %+v with lanes, %+v with the heap", step, op, d0, d1)
				}
				a0, ok0 := sides[0].tb.NextDeadline()
				a1, ok1 := sides[1].tb.NextDeadline()
				if a0 != a1 || ok0 != ok1 {
					t.Fatalf("step %d: NextDeadline %d %v with lanes, %d %v with the heap", step, a0, ok0, a1, ok1)
				}
				if step%50 == 0 && !reflect.DeepEqual(sides[0].tb.Snapshot(), sides[1].tb.Snapshot()) {
					t.Fatalf("step %d: snapshots differ", step)
				}
				for l := range sides[0].tb.lanes {
					inLanes += sides[0].tb.lanes[l].live
				}
				if len(sides[1].tb.lanes[0].items) != 0 {
					t.Fatal("the heap-only table used a lane")
				}
			}
			if inLanes == 0 {
				t.Fatal("nothing was ever in a lane")
			}
		})
	}
}
