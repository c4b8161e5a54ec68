package locktable

import (
	"fmt"
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
