package locktable

import (
	"fmt"
	"testing"
	"time"
)

// TestIndexResizeIncremental proves that the index grows and shrinks
// incrementally (issue #29 item 6): over 200 k acquires of new keys and their
// releases, no single command places more than ixStep migrated entries (plus
// its own key) in the index, although the index is resized many times. A
// rehash all at once places every entry in one command (150 k at the last
// growth before 200 k keys).
func TestIndexResizeIncremental(t *testing.T) {
	const n = 200_000
	tb := New(Limits{IdleCache: -1}, NewCounter(first), &SharedCounts{}, &nopSink{})
	_, step := tb.ixSizes()
	o := own(1, 1)
	toks := make([]uint64, n)
	worst, resizes, size := uint64(0), 0, 0
	for i := range n {
		before := tb.placed
		e := tb.Acquire(t0, o, fmt.Appendf(nil, "grow/%08d", i), 600_000, 0)
		if e.Token == 0 {
			t.Fatalf("key %d: not granted: %+v", i, e)
		}
		toks[i] = e.Token
		worst = max(worst, tb.placed-before-1)
		if len(tb.slots) != size {
			size = len(tb.slots)
			resizes++
		}
	}
	if resizes < 20 || worst > uint64(step) {
		t.Fatalf("growth to %d keys: %d resizes, at most %d entries migrated by one acquire, want ≤ %d", n, resizes, worst, step)
	}
	if err := tb.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	worst, resizes = 0, 0
	for i := range n {
		before := tb.placed
		if e := tb.Release(t0, o, fmt.Appendf(nil, "grow/%08d", i), toks[i]); e.Status != 'O' {
			t.Fatalf("key %d: release: %+v", i, e)
		}
		worst = max(worst, tb.placed-before)
		if len(tb.slots) != size {
			size = len(tb.slots)
			resizes++
		}
		if i%50_000 == 0 {
			if err := tb.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if resizes < 3 || worst > uint64(step) || tb.n != 0 || len(tb.slots) > 64 {
		t.Fatalf("shrink: %d resizes, at most %d entries migrated by one release (want ≤ %d), %d entries and %d slots left",
			resizes, worst, step, tb.n, len(tb.slots))
	}
}

// TestShiftLeasesReheaps: leases and waits share one timer heap (issue #29
// item 6), so ShiftLeases, which moves only the leases, must restore the heap
// order: after the shift every wait (deadline 50–149 ms) fires before every
// lease (10–109 ms, moved by +1 s), in deadline order.
func TestShiftLeasesReheaps(t *testing.T) {
	sink := &recSink{}
	tb := New(Limits{}, NewCounter(first), &SharedCounts{}, sink)
	for i := range 100 {
		key := fmt.Appendf(nil, "shift/%03d", i)
		if e := tb.Acquire(t0, own(1, uint32(i+1)), key, uint32(10+(i*37)%100), 0); e.Token == 0 {
			t.Fatalf("key %d: %+v", i, e)
		}
		if e := tb.Acquire(t0, own(2, uint32(i+1)), key, 1000, uint32(50+(i*53)%100)); e.Status != Queued {
			t.Fatalf("waiter %d: %+v", i, e)
		}
	}
	tb.ShiftLeases(int64(time.Second))
	if err := tb.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if n := tb.Advance(t0 + 150*ms); n != 100 || tb.Waiters() != 0 || tb.Holders() != 100 {
		t.Fatalf("advance to 150 ms: %d applied, %d waiters, %d holders; want 100 timeouts, every lease kept", n, tb.Waiters(), tb.Holders())
	}
	if n := tb.Advance(t0 + 1109*ms); n != 100 || tb.Holders() != 0 {
		t.Fatalf("advance past the shifted leases: %d applied, %d holders", n, tb.Holders())
	}
}
