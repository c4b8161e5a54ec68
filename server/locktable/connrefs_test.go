package locktable

import (
	"fmt"
	"math"
	"testing"
)

// Connections taking turns on one table (the pipelined row: 8 connections
// on every shard) keep their references while they hold nothing, so a
// re-acquire finds the reference without a map update; the kept ones stay
// bounded when many connections come and go (issue 35).
func TestConnRefsKeptAcrossTurns(t *testing.T) {
	tb := New(Limits{}, NewCounter(1), &SharedCounts{}, &nopSink{})
	key := func(c, i int) []byte { return fmt.Appendf(nil, "c%d-k%d", c, i) }
	for round := range 50 {
		for c := 1; c <= 8; c++ {
			o := Owner{Conn: uint64(c), ReqID: uint32(round)}
			e := tb.Acquire(0, o, key(c, round), 1000, 0)
			if e.Status != 'G' {
				t.Fatalf("acquire: %+v", e)
			}
			if r := tb.Release(0, o, key(c, round), e.Token); r.Status != 'O' {
				t.Fatalf("release: %+v", r)
			}
		}
		for c := 1; c <= 8; c++ {
			if tb.connIx[uint64(c)] == 0 {
				t.Fatalf("round %d: connection %d's reference freed once it held nothing", round, c)
			}
		}
		if err := tb.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	// Many connections, each once: the unused references stay bounded.
	for c := 100; c < 1100; c++ {
		o := Owner{Conn: uint64(c), ReqID: 1}
		e := tb.Acquire(0, o, key(c, 0), 1000, 0)
		tb.Release(0, o, key(c, 0), e.Token)
		if err := tb.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(tb.connIx); n > minZeroRefs+len(tb.conns)/4 || len(tb.conns) > 2*minZeroRefs {
		t.Fatalf("%d references indexed, %d places after 1000 connections came and went", n, len(tb.conns))
	}
}

// EarliestArmed names the earliest deadline armed since its last call, so
// a timer sleeping until NextDeadline is woken only when a deadline before
// it was armed (issue 35); disarming reports nothing, ShiftLeases reports
// "unknown".
func TestEarliestArmed(t *testing.T) {
	tb := New(Limits{}, NewCounter(1), &SharedCounts{}, &nopSink{})
	if got := tb.EarliestArmed(); got != math.MinInt64 {
		t.Fatalf("fresh table: %d, want MinInt64 (unknown)", got)
	}
	if got := tb.EarliestArmed(); got != math.MaxInt64 {
		t.Fatalf("nothing armed: %d", got)
	}
	a := Owner{Conn: 1, ReqID: 1}
	ea := tb.Acquire(1000, a, []byte("a"), 5000, 0) // lease until 1000 + 5000 ms
	tb.Acquire(2000, Owner{Conn: 1, ReqID: 2}, []byte("b"), 10, 0)
	if got, want := tb.EarliestArmed(), int64(2000+10*1e6); got != want {
		t.Fatalf("after two grants: %d, want %d (the shorter lease)", got, want)
	}
	tb.Release(3000, a, []byte("a"), ea.Token)
	if got := tb.EarliestArmed(); got != math.MaxInt64 {
		t.Fatalf("after a release: %d, want MaxInt64", got)
	}
	// a waiter's wait deadline counts too
	tb.Acquire(4000, Owner{Conn: 2, ReqID: 1}, []byte("b"), 10, 7)
	if got, want := tb.EarliestArmed(), int64(4000+7*1e6); got != want {
		t.Fatalf("after a wait: %d, want %d", got, want)
	}
	tb.ShiftLeases(-1)
	if got := tb.EarliestArmed(); got != math.MinInt64 {
		t.Fatalf("after ShiftLeases: %d, want MinInt64", got)
	}
	if d, ok := tb.NextDeadline(); !ok || d != 4000+7*1e6 { // the wait (ShiftLeases moves leases only)
		t.Fatalf("NextDeadline %d %v", d, ok)
	}
}
