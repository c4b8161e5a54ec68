package server_test

// protocol.md §3: responses, matching by req_id, pipelining, flow control.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server"
	st "github.com/ticketing/ticketing/server/servertest"
)

// 2,000 requests of every kind in one write: each answered exactly once,
// matched by req_id, processed in order.
func TestPipeline2000(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	h.MustAcquire("p/hot", 600000)
	c := dial(t, s)
	const n = 2000
	want := make(map[uint32]wire.Status, n)
	var b []byte
	for i := uint32(1); i <= n; i++ {
		id := i * 7919 // not in order, not contiguous
		switch i % 5 {
		case 0:
			b = wire.AppendAcquire(b, id, fmt.Sprintf("p/%d", i), 60000, 0)
			want[id] = wire.StatusGranted
		case 1:
			b = wire.AppendPing(b, id)
			want[id] = wire.StatusPong
		case 2:
			b = wire.AppendAcquire(b, id, "p/hot", 60000, 0)
			want[id] = wire.StatusTimeout
		case 3:
			b = wire.AppendRelease(b, id, "p/none", uint64(i))
			want[id] = wire.StatusNotHolder
		case 4:
			b = wire.AppendQuery(b, id, []byte(`{"cmd":"time"}`))
			want[id] = wire.StatusAdmin
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- c.WriteErr(b) }() // keep reading while writing (§3.2)
	var lastTok uint64
	for range n {
		r := c.Read()
		st, ok := want[r.ReqID]
		if !ok {
			t.Fatalf("unexpected or repeated req_id %d", r.ReqID)
		}
		delete(want, r.ReqID)
		expect(t, r, st, 0, r.ReqID)
		if st == wire.StatusGranted {
			if r.Value <= lastTok {
				t.Fatalf("tokens not increasing in request order: %d after %d", r.Value, lastTok)
			}
			lastTok = r.Value
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if len(want) != 0 {
		t.Fatalf("%d requests unanswered", len(want))
	}
	c.ExpectNothing(20 * time.Millisecond)
}

// §3.1: an acquire waiting in a queue does not delay later responses.
func TestWaitingAcquireDoesNotDelay(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	tok := h.MustAcquire("wd", 600000)
	c := dial(t, s)
	var b []byte
	b = wire.AppendAcquire(b, 1, "wd", 60000, 60000)
	b = wire.AppendPing(b, 2)
	b = wire.AppendAcquire(b, 3, "wd-free", 60000, 0)
	b = wire.AppendRelease(b, 4, "wd", tok+1)
	b = wire.AppendQuery(b, 5, []byte(`{"cmd":"time"}`))
	b = wire.AppendCancel(b, 6, "wd", 99)
	c.Write(b)
	expect(t, c.Read(), wire.StatusPong, 0, 2)
	expect(t, c.Read(), wire.StatusGranted, 0, 3)
	expect(t, c.Read(), wire.StatusNotHolder, 0, 4)
	expect(t, c.Read(), wire.StatusAdmin, 0, 5)
	expect(t, c.Read(), wire.StatusNotHolder, 0, 6)
	c.ExpectNothing(50 * time.Millisecond)
	is(t, h.Release("wd", tok), wire.StatusReleased)
	expect(t, c.Read(), wire.StatusGranted, 0, 1)
}

// §3: G's queued field is the time waited in 16 ms units, rounded down: a
// lower bound of the real wait.
func TestGrantQueuedField(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	h := dial(t, s)
	tok := h.MustAcquire("qf", 600000)
	c := dial(t, s)
	sent := time.Now()
	c.Write(wire.AppendAcquire(nil, 1, "qf", 60000, 60000))
	waitDepth(t, h, "qf", 1)
	// It has waited ≥ 120 ms now, as the server's locks reply says.
	waitFor(t, "the waiter 120 ms old", func() bool {
		l := locks(t, h, `{"cmd":"locks","prefix":"qf"}`)
		return len(l.Locks) > 0 && l.Locks[0].Key == "qf" && l.Locks[0].OldestWaiterAgeMS >= 120
	})
	is(t, h.Release("qf", tok), wire.StatusReleased)
	g := c.Read()
	got := time.Since(sent)
	expect(t, g, wire.StatusGranted, 0, 1)
	if g.Queued < 3 {
		t.Fatalf("queued = %d after waiting ≥ 120 ms, want ≥ 3 (48 ms)", g.Queued)
	}
	if wire.QueuedDuration(g.Queued) > got {
		t.Fatalf("queued = %d (%v) exceeds the %v since sending", g.Queued, wire.QueuedDuration(g.Queued), got)
	}
	// An immediate grant has queued 0.
	if r := c.Acquire("qf2", 1000, 1000); r.Status != wire.StatusGranted || r.Queued != 0 {
		t.Fatalf("immediate grant: %s", st.Describe(r))
	}
}

// §3: P carries the server wall clock in µs since the Unix epoch.
func TestPongClock(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	before := time.Now().UnixMicro()
	p := c.Ping()
	after := time.Now().UnixMicro()
	if v := int64(p.Value); v < before-5e6 || v > after+5e6 {
		t.Fatalf("pong %d µs, wall clock %d..%d", v, before, after)
	}
	checkResponseShape(t, p)
	if p.Code != 0 || p.Queued != 0 {
		t.Fatalf("pong header: %s", st.Describe(p))
	}
	// The server's clock is the one it was given.
	fixed := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	s2 := startServer(t, func(c *server.Config) { c.Now = func() time.Time { return fixed } })
	if v := dial(t, s2).Ping().Value; int64(v) != fixed.UnixMicro() {
		t.Fatalf("pong %d, want the server clock %d", v, fixed.UnixMicro())
	}
}

// §3: E payload is a UTF-8 message of at most 1,024 bytes whose length is
// the value; J payload is a JSON object.
func TestPayloads(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	c := dial(t, s)
	for _, f := range [][]byte{
		keyFrame('A', 0, 1, okArg, "\xff\xfe"),
		keyFrame('A', 1, 2, okArg, "k"),
		wire.AppendQuery(nil, 3, []byte(`{"cmd":"add-node"}`)),
		wire.AppendQuery(nil, 4, []byte(`{"cmd":"nope"}`)),
	} {
		r := c.Do(f)
		if r.Status != wire.StatusError || len(r.Payload) == 0 {
			t.Fatalf("%s: want E with a message", st.Describe(r))
		}
		checkResponseShape(t, r)
	}
	for _, q := range []string{`{"cmd":"status"}`, `{"cmd":"locks"}`, `{"cmd":"time"}`, `{"cmd":"members"}`} {
		r := c.Query(q)
		var m map[string]json.RawMessage
		if r.Status != wire.StatusAdmin || json.Unmarshal(r.Payload, &m) != nil || m == nil || uint64(len(r.Payload)) != r.Value {
			t.Fatalf("%s: %s, want J with a JSON object", q, st.Describe(r))
		}
	}
}

// §3.3: max_inflight bounds a connection's queued acquires; answers given at
// once never count.
func TestMaxInflight(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.MaxInflight = 3 })
	h := dial(t, s)
	tok1 := h.MustAcquire("mi/1", 600000)
	h.MustAcquire("mi/2", 600000)
	c := dial(t, s)
	if c.Welcome.MaxInflight != 3 {
		t.Fatalf("WELCOME max_inflight %d, want 3", c.Welcome.MaxInflight)
	}
	var b []byte
	b = wire.AppendAcquire(b, 1, "mi/1", 60000, 60000)
	b = wire.AppendAcquire(b, 2, "mi/1", 60000, 60000)
	b = wire.AppendAcquire(b, 3, "mi/2", 60000, 60000)
	b = wire.AppendAcquire(b, 4, "mi/1", 60000, 60000) // a 4th would queue
	b = wire.AppendAcquire(b, 5, "mi/free", 60000, 60000)
	b = wire.AppendAcquire(b, 6, "mi/1", 60000, 0)
	b = wire.AppendPing(b, 7)
	b = wire.AppendRelease(b, 8, "mi/1", 1)
	c.Write(b)
	expect(t, c.Read(), wire.StatusBusy, wire.CodeOverloaded, 4)
	expect(t, c.Read(), wire.StatusGranted, 0, 5)
	expect(t, c.Read(), wire.StatusTimeout, 0, 6)
	expect(t, c.Read(), wire.StatusPong, 0, 7)
	expect(t, c.Read(), wire.StatusNotHolder, 0, 8)
	// Any number of immediate answers may be pipelined at the limit.
	b = b[:0]
	for i := range 500 {
		b = wire.AppendPing(b, uint32(100+i))
	}
	c.Write(b)
	for i := range 500 {
		expect(t, c.Read(), wire.StatusPong, 0, uint32(100+i))
	}
	// Another connection has its own budget.
	o := dial(t, s)
	o.Write(wire.AppendAcquire(nil, 1, "mi/2", 60000, 60000))
	waitDepth(t, h, "mi/2", 2)
	// Withdrawing one frees a slot.
	c.Write(wire.AppendCancel(nil, 9, "mi/1", 1))
	expect(t, c.Read(), wire.StatusTimeout, 0, 1)
	expect(t, c.Read(), wire.StatusReleased, 0, 9)
	c.Write(wire.AppendAcquire(nil, 10, "mi/2", 60000, 60000))
	c.Write(wire.AppendAcquire(nil, 11, "mi/2", 60000, 60000))
	expect(t, c.Read(), wire.StatusBusy, wire.CodeOverloaded, 11)
	// An answer (a handoff) frees a slot too.
	is(t, h.Release("mi/1", tok1), wire.StatusReleased)
	g := c.Read()
	expect(t, g, wire.StatusGranted, 0, 2)
	c.Write(wire.AppendAcquire(nil, 12, "mi/1", 60000, 60000))
	c.ExpectNothing(50 * time.Millisecond)
	if d := queueDepth(t, h, "mi/1"); d != 1 {
		t.Fatalf("mi/1 depth %d, want 1 (req 12)", d)
	}
}

func TestMaxInflightConfig(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.MaxInflight = 0
	if _, err := server.New(cfg); !errors.Is(err, server.ErrConfig) {
		t.Fatalf("max_inflight 0: %v, want a config error (it is at least 1)", err)
	}
}

// pipeListener hands net.Pipe ends to Serve: an unbuffered transport, so a
// server that stops reading blocks the client's write at once and every byte
// the client got rid of is in the server's memory.
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) Dial() (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case l.ch <- a:
		return b, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// serveOn runs New(cfg) + Serve(ln) and shuts it down when the test ends,
// checking that Serve returns ErrServerClosed.
func serveOn(tb testing.TB, ln net.Listener, mod func(*server.Config)) *server.Server {
	tb.Helper()
	cfg := server.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Shards = 2
	if mod != nil {
		mod(&cfg)
	}
	s, err := server.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			tb.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			tb.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return s
}

// pipeDial connects through a pipeListener and handshakes as admin.
func pipeDial(tb testing.TB, ln *pipeListener) *st.Conn {
	tb.Helper()
	nc, err := ln.Dial()
	if err != nil {
		tb.Fatal(err)
	}
	c := st.Wrap(tb, nc)
	if err := c.Handshake(st.Options{Role: wire.RoleAdmin}); err != nil {
		tb.Fatal(err)
	}
	return c
}

// stalledWriter writes b in chunks from a goroutine and counts what the
// transport accepted.
type stalledWriter struct {
	written atomic.Int64
	done    chan error
}

func startWriter(c *st.Conn, b []byte, chunk int) *stalledWriter {
	w := &stalledWriter{done: make(chan error, 1)}
	go func() {
		_ = c.NC.SetWriteDeadline(time.Now().Add(30 * time.Second))
		for len(b) > 0 {
			n := min(chunk, len(b))
			m, err := c.NC.Write(b[:n])
			w.written.Add(int64(m))
			if err != nil {
				w.done <- err
				return
			}
			b = b[n:]
		}
		w.done <- nil
	}()
	return w
}

// waitStall waits until the writer made no progress for 200 ms.
func (w *stalledWriter) waitStall(tb testing.TB) int64 {
	tb.Helper()
	last := int64(-1)
	deadline := time.Now().Add(long)
	for time.Now().Before(deadline) {
		select {
		case err := <-w.done:
			tb.Fatalf("the writer finished (err %v) although nobody reads: no backpressure", err)
		case <-time.After(200 * time.Millisecond):
		}
		n := w.written.Load()
		if n == last {
			return n
		}
		last = n
	}
	tb.Fatal("the writer never stalled")
	return 0
}

// §3.3: a client that never reads: the server stops reading (backpressure)
// with a bounded amount of its requests in memory; once the client reads,
// everything is answered.
func TestBackpressureNonReader(t *testing.T) {
	t.Parallel()
	const n = 65536 // 1 MiB of pings
	var b []byte
	for i := range n {
		b = wire.AppendPing(b, uint32(i))
	}
	readAll := func(t *testing.T, c *st.Conn, w *stalledWriter) {
		for i := range n {
			r := c.Read()
			if r.Status != wire.StatusPong || r.ReqID != uint32(i) {
				t.Fatalf("response %d: %s", i, st.Describe(r))
			}
		}
		if err := <-w.done; err != nil {
			t.Fatal(err)
		}
		c.Ping()
	}
	t.Run("pipe", func(t *testing.T) {
		t.Parallel()
		ln := newPipeListener()
		serveOn(t, ln, func(c *server.Config) { c.OutBufferLimit = 4096 })
		c := pipeDial(t, ln)
		w := startWriter(c, b, 4096)
		stalled := w.waitStall(t)
		// What the server took in and has not answered: at most a read
		// buffer, a batch of responses and the output bound, with room.
		if stalled > 256<<10 {
			t.Fatalf("the server read %d bytes from a client that does not read", stalled)
		}
		t.Logf("stalled after %d of %d bytes", stalled, len(b))
		readAll(t, c, w)
	})
	t.Run("tcp", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		c := dial(t, s)
		w := startWriter(c, b, 64<<10)
		time.Sleep(300 * time.Millisecond) // not reading for a while
		readAll(t, c, w)
	})
}

// §3.3: the output bound also holds for large admin replies: a pipeline of
// queries whose replies are far larger than the requests does not pile up in
// the server's memory while the client does not read.
func TestBackpressureLargeReplies(t *testing.T) {
	// Not parallel: it measures the heap.
	ln := newPipeListener()
	serveOn(t, ln, func(c *server.Config) { c.OutBufferLimit = 4096 })
	c := pipeDial(t, ln)
	var b []byte
	for i := range 300 {
		b = wire.AppendAcquire(b, uint32(i+1), fmt.Sprintf("big/%04d/%s", i, padBody("", "", 100)), 3_600_000, 0)
	}
	w := startWriter(c, b, len(b))
	for range 300 {
		is(t, c.Read(), wire.StatusGranted)
	}
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
	const queries = 200 // each reply ~65 KB: ~13 MB if the server buffered them all
	b = b[:0]
	for i := range queries {
		b = wire.AppendQuery(b, uint32(1000+i), []byte(`{"cmd":"locks","limit":10000}`))
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	w = startWriter(c, b, len(b)) // one batch: the server reads it whole
	time.Sleep(500 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapAlloc) - int64(base)
	t.Logf("heap grew %d KB while not reading", grown>>10)
	if grown > 4<<20 {
		t.Fatalf("heap grew by %d MB while the client did not read: output is not bounded", grown>>20)
	}
	for i := range queries {
		r := c.Read()
		if r.Status != wire.StatusAdmin || r.ReqID != uint32(1000+i) {
			t.Fatalf("reply %d: %s", i, st.Describe(r))
		}
	}
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
}
