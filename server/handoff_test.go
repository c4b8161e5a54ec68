package server_test

import (
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

// Handoffs: a release that grants the head of the queue on another
// connection (docs/benchmarks.md "Hot key"). These tests pin the grant's
// delivery whatever way the releaser's batch ends, its order along a queue,
// and its allocations (any delivery path must keep them).

// TestHandoffGrantWhenReleaserBatchEndsInError: the release and a frame with
// an unknown op arrive in one read; the releaser is closed after E BAD_OP,
// and the waiter still gets its grant (not lost with the batch).
func TestHandoffGrantWhenReleaserBatchEndsInError(t *testing.T) {
	s := startServer(t, nil)
	a, b := dial(t, s), dial(t, s)
	tok := a.MustAcquire("hk", 60000)
	b.Write(wire.AppendAcquire(nil, 1, "hk", 60000, 30000))
	expect(t, b.Do(wire.AppendPing(nil, 2)), wire.StatusPong, 0, 2) // queued
	a.Write(append(wire.AppendRelease(nil, 9, "hk", tok), st.Header('Z', 0, 0, 99, 0)...))
	r := is(t, b.Read(), wire.StatusGranted)
	if r.ReqID != 1 || r.Value <= tok {
		t.Fatalf("grant %+v after token %d", r, tok)
	}
	expect(t, a.Read(), wire.StatusReleased, 0, 9)
	expectE(t, a.Read(), wire.CodeBadOp, 99)
}

// TestHandoffChainFIFO: one key, n connections queued; each holder's
// release hands the lock to the next in queue order.
func TestHandoffChainFIFO(t *testing.T) {
	s := startServer(t, nil)
	const n = 20
	holder := dial(t, s)
	tok := holder.MustAcquire("chain", 60000)
	admin := dialRole(t, s, wire.RoleAdmin, "")
	cs := make([]*st.Conn, n)
	for i := range cs {
		cs[i] = dial(t, s)
		cs[i].Write(wire.AppendAcquire(nil, uint32(100+i), "chain", 60000, 30000))
		waitDepth(t, admin, "chain", i+1)
	}
	expect(t, holder.Do(wire.AppendRelease(nil, 1, "chain", tok)), wire.StatusReleased, 0, 1)
	for i, c := range cs {
		r := is(t, c.Read(), wire.StatusGranted)
		if r.ReqID != uint32(100+i) || r.Value != tok+uint64(i)+1 {
			t.Fatalf("waiter %d: %+v, want req %d token %d", i, r, 100+i, tok+uint64(i)+1)
		}
		expect(t, c.Do(wire.AppendRelease(nil, 1, "chain", r.Value)), wire.StatusReleased, 0, 1)
	}
}

// TestHandoffNoAlloc: a handoff between two connections over loopback (a
// release that grants the queued waiter, and the releaser's next acquire
// queued behind it) allocates nothing in the process, client side included.
func TestHandoffNoAlloc(t *testing.T) {
	if server.RaceEnabled {
		t.Skip("the race detector allocates")
	}
	s := startServer(t, nil)
	a, b := dial(t, s), dial(t, s)
	const key = "hot-key-0000000a" // 16 bytes
	tok := a.MustAcquire(key, 60000)
	b.Write(wire.AppendAcquire(nil, 1, key, 60000, 30000))
	expect(t, b.Do(wire.AppendPing(nil, 2)), wire.StatusPong, 0, 2)
	conns := [2]*st.Conn{a, b}
	for _, c := range conns {
		_ = c.NC.SetReadDeadline(time.Now().Add(time.Minute))
		if c.Buffered() != 0 {
			t.Fatal("unread answers")
		}
	}
	out := make([]byte, 0, 128)
	in := make([]byte, wire.HeaderLen)
	id := uint32(10)
	holder := 0
	step := func() {
		h, w := conns[holder], conns[1-holder]
		// release + acquire(wait) again: the waiter is granted, the releaser queued
		out = wire.AppendRelease(out[:0], id, key, tok)
		out = wire.AppendAcquire(out, id+1, key, 60000, 30000)
		id += 2
		if _, err := h.NC.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(w.NC, in); err != nil || in[0] != byte(wire.StatusGranted) {
			t.Fatalf("waiter: %v %q", err, in)
		}
		tok = binary.BigEndian.Uint64(in[8:])
		if _, err := io.ReadFull(h.NC, in); err != nil || in[0] != byte(wire.StatusReleased) {
			t.Fatalf("releaser: %v %q", err, in)
		}
		holder = 1 - holder
	}
	for range 100 {
		step()
	}
	if allocs := testing.AllocsPerRun(500, step); allocs != 0 {
		t.Fatalf("%v allocations per handoff, want 0", allocs)
	}
}
