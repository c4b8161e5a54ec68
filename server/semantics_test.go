package server_test

// protocol.md §5: the request × key state matrix, events, limits, shutdown.

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

// FIFO handoff across 6 waiters on 6 connections, a new, strictly larger
// token on each handoff, and no free moment in between.
func TestFIFOHandoff(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	admin := dial(t, s)
	outsider := dial(t, s)
	h := dial(t, s)
	tok := h.MustAcquire("fifo", 600000)
	const n = 6
	ws := make([]*st.Conn, n)
	for i := range ws {
		ws[i] = dial(t, s)
		ws[i].Write(wire.AppendAcquire(nil, uint32(100+i), "fifo", 600000, 600000))
		waitDepth(t, admin, "fifo", i+1) // queued in this order
	}
	holder := h
	for i, w := range ws {
		is(t, holder.Release("fifo", tok), wire.StatusReleased)
		// Direct handoff: the key is never free, so an outsider's try fails.
		is(t, outsider.Acquire("fifo", 1000, 0), wire.StatusTimeout)
		g := w.Read()
		expect(t, g, wire.StatusGranted, 0, uint32(100+i))
		if g.Value <= tok {
			t.Fatalf("handoff %d: token %d not above %d", i, g.Value, tok)
		}
		for _, later := range ws[i+1:] {
			if later.Buffered() != 0 {
				t.Fatalf("a later waiter got an answer before waiter %d", i)
			}
		}
		if d := queueDepth(t, admin, "fifo"); d != n-1-i {
			t.Fatalf("after handoff %d depth %d", i, d)
		}
		tok, holder = g.Value, w
	}
	is(t, holder.Release("fifo", tok), wire.StatusReleased)
	if d := queueDepth(t, admin, "fifo"); d != -1 {
		t.Fatal("fifo still held after the last release")
	}
	is(t, outsider.Acquire("fifo", 1000, 0), wire.StatusGranted)
}

// A holder's lease expires: with waiters the queue head is granted a new
// token; without, the key becomes free. A lease never ends before lease_ms.
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	t.Run("handoff", func(t *testing.T) {
		t.Parallel()
		h := dial(t, s)
		sent := time.Now()
		tok := h.MustAcquire("exp/h", 300)
		w := dial(t, s)
		w.Write(wire.AppendAcquire(nil, 1, "exp/h", 300, 10000))
		x := dial(t, s)
		waitDepth(t, h, "exp/h", 1)
		x.Write(wire.AppendAcquire(nil, 2, "exp/h", 60000, 10000))
		waitDepth(t, h, "exp/h", 2)
		g := w.Read()
		if el := time.Since(sent); el < 300*time.Millisecond {
			t.Fatalf("lease of 300 ms ended after %v", el)
		}
		expect(t, g, wire.StatusGranted, 0, 1)
		if g.Value <= tok {
			t.Fatalf("expiry handoff token %d not above %d", g.Value, tok)
		}
		// The old holder's token is dead.
		is(t, h.Release("exp/h", tok), wire.StatusNotHolder)
		// The handed-off lease counts from the handoff: x waits another 300 ms.
		g2 := x.Read()
		if el := time.Since(sent); el < 600*time.Millisecond {
			t.Fatalf("second lease ended %v after the first grant, want ≥ 600 ms", el)
		}
		expect(t, g2, wire.StatusGranted, 0, 2)
		if g2.Value <= g.Value {
			t.Fatal("tokens not increasing")
		}
		is(t, x.Release("exp/h", g2.Value), wire.StatusReleased)
	})
	t.Run("free", func(t *testing.T) {
		t.Parallel()
		h := dial(t, s)
		sent := time.Now()
		tok := h.MustAcquire("exp/f", 200)
		o := dial(t, s)
		waitFor(t, "the lease to expire", func() bool {
			r := o.Acquire("exp/f", 60000, 0)
			return r.Status == wire.StatusGranted
		})
		if el := time.Since(sent); el < 200*time.Millisecond {
			t.Fatalf("lease of 200 ms ended after %v", el)
		}
		is(t, h.Release("exp/f", tok), wire.StatusNotHolder)
	})
}

// A waiter whose wait elapses gets T and leaves the queue; wait 0 is try once.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	tok := h.MustAcquire("wt", 600000)
	c := dial(t, s)
	sent := time.Now()
	c.Write(wire.AppendAcquire(nil, 1, "wt", 60000, 200))
	expect(t, c.Read(), wire.StatusTimeout, 0, 1)
	if el := time.Since(sent); el < 200*time.Millisecond {
		t.Fatalf("wait of 200 ms timed out after %v", el)
	}
	if d := queueDepth(t, h, "wt"); d != 0 {
		t.Fatalf("depth %d after the wait elapsed", d)
	}
	// wait 0 on held, and on held+queued: T at once, nothing queued.
	expect(t, c.Do(wire.AppendAcquire(nil, 2, "wt", 60000, 0)), wire.StatusTimeout, 0, 2)
	o := dial(t, s)
	o.Write(wire.AppendAcquire(nil, 1, "wt", 60000, 60000))
	waitDepth(t, h, "wt", 1)
	expect(t, c.Do(wire.AppendAcquire(nil, 3, "wt", 60000, 0)), wire.StatusTimeout, 0, 3)
	if d := queueDepth(t, h, "wt"); d != 1 {
		t.Fatalf("depth %d: a wait-0 acquire queued", d)
	}
	is(t, h.Release("wt", tok), wire.StatusReleased)
	is(t, o.Read(), wire.StatusGranted)
	c.ExpectNothing(50 * time.Millisecond) // the timed-out acquire is never granted
}

// Not reentrant: the holder's own acquire queues like any other.
func TestNotReentrant(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	tok := c.MustAcquire("re", 600000)
	expect(t, c.Do(wire.AppendAcquire(nil, 1, "re", 60000, 0)), wire.StatusTimeout, 0, 1)
	c.Write(wire.AppendAcquire(nil, 2, "re", 60000, 60000))
	c.ExpectNothing(50 * time.Millisecond)
	if d := queueDepth(t, c, "re"); d != 1 {
		t.Fatalf("depth %d, want the holder's own acquire queued", d)
	}
	c.Write(wire.AppendRelease(nil, 3, "re", tok))
	got := map[uint32]wire.Response{}
	for range 2 {
		r := c.Read()
		got[r.ReqID] = r
	}
	expect(t, got[3], wire.StatusReleased, 0, 3)
	expect(t, got[2], wire.StatusGranted, 0, 2)
	if got[2].Value <= tok {
		t.Fatal("new token not above the old")
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	o := dial(t, s)
	tok := c.MustAcquire("rel", 600000)
	for _, bad := range []uint64{0, 1, tok - 1, tok + 1, ^uint64(0)} {
		expect(t, c.Do(wire.AppendRelease(nil, 1, "rel", bad)), wire.StatusNotHolder, 0, 1)
	}
	is(t, c.Release("rel-never-held", tok), wire.StatusNotHolder)
	is(t, c.Acquire("rel", 1000, 0), wire.StatusTimeout) // still held
	// Release is authorized by the token alone: another connection may.
	is(t, o.Release("rel", tok), wire.StatusReleased)
	is(t, c.Release("rel", tok), wire.StatusNotHolder) // free now
	// A stale token of an earlier grant does not release a later one.
	tok2 := c.MustAcquire("rel", 600000)
	is(t, o.Release("rel", tok), wire.StatusNotHolder)
	is(t, o.Release("rel", tok2), wire.StatusReleased)
	// A client role releases by token as well.
	tok3 := c.MustAcquire("rel", 600000)
	cl := dialRole(t, s, wire.RoleClient, "")
	is(t, cl.Release("rel", tok3), wire.StatusReleased)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	tok := h.MustAcquire("cx", 600000)
	h.MustAcquire("cy", 600000)
	c := dial(t, s)
	o := dial(t, s)

	// cancel → T for the acquire, then O for the cancel, in that order.
	c.Write(wire.AppendAcquire(nil, 10, "cx", 60000, 60000))
	waitDepth(t, h, "cx", 1)
	c.Write(wire.AppendCancel(nil, 11, "cx", 10))
	expect(t, c.Read(), wire.StatusTimeout, 0, 10)
	expect(t, c.Read(), wire.StatusReleased, 0, 11)
	if d := queueDepth(t, h, "cx"); d != 0 {
		t.Fatalf("depth %d after cancel", d)
	}
	// Same in one write with the acquire, and reserved bytes 12..16 ignored.
	c.Write(append(wire.AppendAcquire(nil, 12, "cx", 60000, 60000), keyFrame('C', 0, 13, 12<<32|0xdeadbeef, "cx")...))
	expect(t, c.Read(), wire.StatusTimeout, 0, 12)
	expect(t, c.Read(), wire.StatusReleased, 0, 13)

	// Cancel of anything else: N, nothing changed.
	c.Write(wire.AppendAcquire(nil, 20, "cx", 60000, 60000))
	waitDepth(t, h, "cx", 1)
	for _, f := range [][]byte{
		wire.AppendCancel(nil, 21, "cx", 999),   // unknown req_id
		wire.AppendCancel(nil, 22, "cy", 20),    // right req_id, wrong key
		wire.AppendCancel(nil, 23, "cx", 10),    // already answered
		wire.AppendCancel(nil, 24, "nokey", 20), // a key nobody uses
	} {
		r := c.Do(f)
		is(t, r, wire.StatusNotHolder)
	}
	is(t, o.Do(wire.AppendCancel(nil, 25, "cx", 20)), wire.StatusNotHolder) // another connection's
	if d := queueDepth(t, h, "cx"); d != 1 {
		t.Fatalf("depth %d: a failed cancel changed the queue", d)
	}
	// Cancel after the grant: G, then N.
	is(t, h.Release("cx", tok), wire.StatusReleased)
	g := c.Read()
	expect(t, g, wire.StatusGranted, 0, 20)
	expect(t, c.Do(wire.AppendCancel(nil, 26, "cx", 20)), wire.StatusNotHolder, 0, 26)
	is(t, c.Release("cx", g.Value), wire.StatusReleased)
	c.ExpectNothing(30 * time.Millisecond)
}

// A waiter whose connection closed is skipped: the next waiter gets the key.
// A half-close counts as a close.
func TestClosedWaiterSkipped(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	admin := dial(t, s)
	h := dial(t, s)
	tok := h.MustAcquire("cw", 600000)
	w1 := dial(t, s)
	w1.Write(wire.AppendAcquire(nil, 1, "cw", 60000, 60000))
	waitDepth(t, admin, "cw", 1)
	w2 := dial(t, s)
	w2.Write(wire.AppendAcquire(nil, 1, "cw", 60000, 60000))
	waitDepth(t, admin, "cw", 2)
	w3 := dial(t, s)
	w3.Write(wire.AppendAcquire(nil, 1, "cw", 60000, 60000))
	waitDepth(t, admin, "cw", 3)

	w1.Close()
	// w2 half-closes after a ping: it still reads the pong, then EOF.
	w2.Write(wire.AppendPing(nil, 2))
	if err := w2.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	expect(t, w2.Read(), wire.StatusPong, 0, 2)
	w2.ExpectEOF()
	waitDepth(t, admin, "cw", 1)
	is(t, h.Release("cw", tok), wire.StatusReleased)
	g := w3.Read()
	expect(t, g, wire.StatusGranted, 0, 1)
	if g.Value != tok+1 {
		// the closed waiters were not granted in between
		l := locks(t, admin, `{"cmd":"locks","prefix":"cw"}`)
		if l.Locks[0].Token != g.Value {
			t.Fatalf("holder %+v, want w3's token %d", l, g.Value)
		}
	}
}

// A closed holder's lock stays held until its lease ends (or a release by
// its token).
func TestClosedHolderKeepsLock(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	admin := dial(t, s)
	base := status(t, admin).Connections // admin alone
	t.Run("until lease", func(t *testing.T) {
		h := st.Dial(t, s.Addr(), st.Options{})
		sent := time.Now()
		tok := h.MustAcquire("ch/lease", 1500)
		h.Close()
		waitConns(t, admin, base)
		o := dial(t, s)
		is(t, o.Acquire("ch/lease", 1000, 0), wire.StatusTimeout)
		l := locks(t, admin, `{"cmd":"locks","prefix":"ch/lease"}`)
		if l.Total != 1 || l.Locks[0].Token != tok {
			t.Fatalf("after the holder closed: %+v", l)
		}
		o.Write(wire.AppendAcquire(nil, 1, "ch/lease", 1000, 10000))
		g := o.Read()
		if el := time.Since(sent); el < 1500*time.Millisecond {
			t.Fatalf("the closed holder's 1500 ms lease ended after %v", el)
		}
		expect(t, g, wire.StatusGranted, 0, 1)
	})
	t.Run("release by token", func(t *testing.T) {
		h := st.Dial(t, s.Addr(), st.Options{})
		tok := h.MustAcquire("ch/rel", 600000)
		h.Close()
		// base, not "one fewer than now": the previous subtest's
		// connections close at its cleanup, asynchronously to this one.
		waitConns(t, admin, base)
		o := dial(t, s)
		is(t, o.Acquire("ch/rel", 1000, 0), wire.StatusTimeout)
		is(t, o.Release("ch/rel", tok), wire.StatusReleased)
		is(t, o.Acquire("ch/rel", 1000, 0), wire.StatusGranted)
	})
}

// §4 limits: max_keys and max_waiters → B OVERLOADED, max_waiters_per_key →
// B QUEUE_FULL; a refused acquire is not queued.
func TestLimits(t *testing.T) {
	t.Parallel()
	t.Run("max keys", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, func(c *server.Config) { c.MaxKeys = 3 })
		c := dial(t, s)
		toks := make([]uint64, 3)
		for i := range toks {
			toks[i] = c.MustAcquire(fmt.Sprint("mk/", i), 600000)
		}
		for _, wait := range []uint32{0, 1000} {
			r := c.Do(wire.AppendAcquire(nil, 9, "mk/new", 60000, wait))
			expect(t, r, wire.StatusBusy, wire.CodeOverloaded, 9)
		}
		// Queueing on an existing key is not a new key.
		c.Write(wire.AppendAcquire(nil, 10, "mk/0", 60000, 60000))
		waitDepth(t, c, "mk/0", 1)
		is(t, c.Release("mk/1", toks[1]), wire.StatusReleased)
		is(t, c.Acquire("mk/new", 60000, 0), wire.StatusGranted)
		if busy := status(t, c).Counters.Busy; busy != 2 {
			t.Fatalf("busy counter %d, want 2", busy)
		}
	})
	t.Run("max waiters", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, func(c *server.Config) { c.MaxWaiters = 2 })
		h := dial(t, s)
		for i := range 3 {
			h.MustAcquire(fmt.Sprint("mw/", i), 600000)
		}
		c := dial(t, s)
		c.Write(wire.AppendAcquire(nil, 1, "mw/0", 60000, 60000))
		c.Write(wire.AppendAcquire(nil, 2, "mw/1", 60000, 60000))
		waitFor(t, "2 waiters", func() bool { return status(t, h).Waiters == 2 })
		expect(t, c.Do(wire.AppendAcquire(nil, 3, "mw/2", 60000, 60000)), wire.StatusBusy, wire.CodeOverloaded, 3)
		o := dial(t, s)
		expect(t, o.Do(wire.AppendAcquire(nil, 3, "mw/0", 60000, 60000)), wire.StatusBusy, wire.CodeOverloaded, 3)
		// An immediate grant or try-once is not a waiter.
		is(t, o.Acquire("mw/free", 60000, 60000), wire.StatusGranted)
		is(t, o.Acquire("mw/0", 60000, 0), wire.StatusTimeout)
		// Room again after a cancel.
		c.Write(wire.AppendCancel(nil, 4, "mw/0", 1))
		expect(t, c.Read(), wire.StatusTimeout, 0, 1)
		expect(t, c.Read(), wire.StatusReleased, 0, 4)
		o.Write(wire.AppendAcquire(nil, 5, "mw/2", 60000, 60000))
		o.ExpectNothing(50 * time.Millisecond)
		if w := status(t, h).Waiters; w != 2 {
			t.Fatalf("waiters %d, want 2", w)
		}
	})
	t.Run("max waiters per key", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, func(c *server.Config) { c.MaxWaitersPerKey = 2 })
		h := dial(t, s)
		tok := h.MustAcquire("mq/a", 600000)
		h.MustAcquire("mq/b", 600000)
		c := dial(t, s)
		c.Write(wire.AppendAcquire(nil, 1, "mq/a", 60000, 60000))
		c.Write(wire.AppendAcquire(nil, 2, "mq/a", 60000, 60000))
		waitDepth(t, h, "mq/a", 2)
		expect(t, c.Do(wire.AppendAcquire(nil, 3, "mq/a", 60000, 60000)), wire.StatusBusy, wire.CodeQueueFull, 3)
		// Not outstanding: req_id 3 is free again.
		expect(t, c.Do(wire.AppendPing(nil, 3)), wire.StatusPong, 0, 3)
		// Other keys still queue.
		c.Write(wire.AppendAcquire(nil, 4, "mq/b", 60000, 60000))
		waitDepth(t, h, "mq/b", 1)
		// A handoff makes room on mq/a.
		is(t, h.Release("mq/a", tok), wire.StatusReleased)
		expect(t, c.Read(), wire.StatusGranted, 0, 1)
		c.Write(wire.AppendAcquire(nil, 5, "mq/a", 60000, 60000))
		waitDepth(t, h, "mq/a", 2)
	})
}

// Shutdown answers every waiter B SHUTTING_DOWN, flushes, closes every
// connection and returns within 5 s.
func TestShutdown(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	admin := dial(t, s)
	h := dial(t, s)
	h.MustAcquire("sd/a", 600000)
	h.MustAcquire("sd/b", 600000)
	w1, w2 := dial(t, s), dial(t, s)
	w1.Write(wire.AppendAcquire(nil, 1, "sd/a", 60000, 600000))
	w1.Write(wire.AppendAcquire(nil, 2, "sd/b", 60000, 600000))
	w2.Write(wire.AppendAcquire(nil, 3, "sd/a", 60000, 600000))
	waitFor(t, "3 waiters", func() bool { return status(t, admin).Waiters == 3 })
	idle := dial(t, s) // an idle connection must not hold shutdown up
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Shutdown took %v", el)
	}
	got := map[uint32]bool{}
	for range 2 {
		r := w1.Read()
		expect(t, r, wire.StatusBusy, wire.CodeShuttingDown, r.ReqID)
		got[r.ReqID] = true
	}
	if !got[1] || !got[2] {
		t.Fatalf("w1 answers %v", got)
	}
	expect(t, w2.Read(), wire.StatusBusy, wire.CodeShuttingDown, 3)
	for _, c := range []*st.Conn{w1, w2, h, idle, admin} {
		c.ExpectEOF()
	}
	if _, err := st.DialRawErr(s.Addr(), nil); err == nil {
		t.Fatal("the listener still accepts after Shutdown")
	}
}

// While draining, new acquires are answered B SHUTTING_DOWN (checked with
// the draining flag alone, since Shutdown closes connections right after).
func TestDrainingAcquire(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	tok := h.MustAcquire("dr", 600000)
	c := dial(t, s)
	c.Ping() // c is registered (a connection registering while draining is shut down)
	server.SetDraining(s, true)
	expect(t, c.Do(wire.AppendAcquire(nil, 1, "dr-free", 60000, 0)), wire.StatusBusy, wire.CodeShuttingDown, 1)
	expect(t, c.Do(wire.AppendAcquire(nil, 2, "dr", 60000, 60000)), wire.StatusBusy, wire.CodeShuttingDown, 2)
	expect(t, c.Do(wire.AppendAcquire(nil, 3, "dr", 60000, 0)), wire.StatusBusy, wire.CodeShuttingDown, 3)
	// Field errors still come first.
	expectE(t, c.Do(wire.AppendAcquire(nil, 4, "dr", 0, 0)), wire.CodeBadLease, 4)
	c.Ping()
	server.SetDraining(s, false)
	if d := queueDepth(t, h, "dr"); d != 0 {
		t.Fatal("a draining server queued an acquire")
	}
	is(t, h.Release("dr", tok), wire.StatusReleased)
}

// Shutdown returns in time even when a client stopped reading with output
// pending.
func TestShutdownNonReader(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	h.MustAcquire("nr", 600000)
	c := dial(t, s)
	c.Write(wire.AppendAcquire(nil, 1, "nr", 60000, 600000))
	waitDepth(t, h, "nr", 1)
	_ = c.NC.(*net.TCPConn).SetReadBuffer(4096)
	var b []byte
	for i := range 65536 {
		b = wire.AppendPing(b, uint32(i+10))
	}
	done := make(chan struct{})
	go func() { // pipeline without ever reading, until the server closes
		defer close(done)
		for c.WriteErr(b) == nil {
		}
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Shutdown took %v", el)
	}
	c.Close()
	<-done
}

// Shutdown right after handshakes complete, and while clients keep
// connecting: every connection, even one whose WELCOME was sent while
// Shutdown listed the connections, is closed, and Shutdown returns in time
// without error.
func TestShutdownWhileConnecting(t *testing.T) {
	t.Parallel()
	for round := range 30 {
		s := startServer(t, nil)
		stop := make(chan struct{})
		done := make(chan struct{})
		const busy = 4
		for range busy {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := st.DialRawErr(s.Addr(), nil)
					if err != nil {
						return // the listener is closed
					}
					if c.Handshake(st.Options{}) == nil {
						_ = c.WaitEOF() // the server closes it
					}
					c.Close()
				}
			}()
		}
		fresh := dial(t, s) // Shutdown at once after a handshake
		freshEOF := make(chan error, 1)
		go func() { freshEOF <- fresh.WaitEOF(); fresh.Close() }()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.Shutdown(ctx)
		cancel()
		close(stop)
		for range busy {
			<-done
		}
		if err != nil {
			t.Fatalf("round %d: Shutdown: %v after %v", round, err, time.Since(start))
		}
		if err := <-freshEOF; err != nil {
			t.Fatal(err)
		}
	}
}
