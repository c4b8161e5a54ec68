package server

// The request path's cost: BenchmarkAcquireRelease drives the real read loop
// (frame decode → §2.1 checks → lock table → response encode → batched
// write) of one connection through an in-memory net.Conn that plays a
// pipelining client: acquire and release of one existing key, over and over.

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

// benchClient is a net.Conn whose Read produces pipelined acquire/release
// pairs of one key (each release carrying the token its acquire will get:
// tokens are sequential from the server's first token) and whose Write
// checks every response, without allocating.
type benchClient struct {
	key      string
	pairs    int    // pairs still to send
	perRead  int    // pairs per Read (one pipelined batch)
	next     uint64 // token the next acquire gets
	want     uint64 // token the next G must carry
	reqID    uint32
	answered int
	bad      bool
	badResp  wire.Response
	partial  [wire.HeaderLen]byte
	npartial int
}

func (f *benchClient) Read(p []byte) (int, error) {
	if f.pairs == 0 {
		return 0, io.EOF
	}
	n := 0
	pair := 2 * (wire.HeaderLen + len(f.key))
	for i := 0; i < f.perRead && f.pairs > 0 && len(p)-n >= pair; i++ {
		f.reqID++
		b := wire.AppendAcquire(p[n:n], f.reqID, f.key, 60000, 0)
		f.reqID++
		b = wire.AppendRelease(b, f.reqID, f.key, f.next)
		f.next++
		n += len(b)
		f.pairs--
	}
	return n, nil
}

func (f *benchClient) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if f.npartial > 0 || len(p) < wire.HeaderLen {
			m := copy(f.partial[f.npartial:], p)
			f.npartial += m
			p = p[m:]
			if f.npartial < wire.HeaderLen {
				break
			}
			f.check(f.partial[:])
			f.npartial = 0
			continue
		}
		f.check(p[:wire.HeaderLen])
		p = p[wire.HeaderLen:]
	}
	return total, nil
}

func (f *benchClient) check(h []byte) {
	r, _, err := wire.ParseResponse(h)
	ok := err == nil
	if ok && f.answered%2 == 0 {
		ok = r.Status == wire.StatusGranted && r.Value == f.want
		f.want++
	} else if ok {
		ok = r.Status == wire.StatusReleased
	}
	if !ok && !f.bad {
		f.bad, f.badResp = true, r
	}
	f.answered++
}

func (f *benchClient) Close() error                     { return nil }
func (f *benchClient) LocalAddr() net.Addr              { return benchAddr{} }
func (f *benchClient) RemoteAddr() net.Addr             { return benchAddr{} }
func (f *benchClient) SetDeadline(time.Time) error      { return nil }
func (f *benchClient) SetReadDeadline(time.Time) error  { return nil }
func (f *benchClient) SetWriteDeadline(time.Time) error { return nil }

type benchAddr struct{}

func (benchAddr) Network() string { return "bench" }
func (benchAddr) String() string  { return "bench" }

// newBenchConn returns a server (no listener) and a connection past the
// handshake reading from a benchClient.
func newBenchConn(tb testing.TB, perRead int) (*conn, *benchClient) {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	at := time.UnixMilli(1_700_000_000_000)
	cfg.Now = func() time.Time { return at }
	s, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	first := locktable.FirstToken(at.UnixMilli())
	f := &benchClient{key: "bench/an-existing-key", perRead: perRead, next: first, want: first}
	c := newConn(s, f)
	c.role = wire.RoleClient
	c.rbuf = make([]byte, readBufSize)
	// Warm up: the key exists (idle, ready for reuse), buffers have grown.
	f.pairs = 1000
	c.readLoop()
	if f.bad {
		tb.Fatalf("warm-up: unexpected response %+v", f.badResp)
	}
	return c, f
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, perRead := range []int{1, 64} {
		b.Run(map[int]string{1: "one-pair-per-read", 64: "pipelined-64-pairs"}[perRead], func(b *testing.B) {
			c, f := newBenchConn(b, perRead)
			f.pairs = b.N
			b.ReportAllocs()
			b.ResetTimer()
			c.readLoop()
			b.StopTimer()
			if f.bad {
				b.Fatalf("unexpected response %+v", f.badResp)
			}
			if f.answered != 2*(b.N+1000) {
				b.Fatalf("%d answers for %d requests", f.answered, 2*(b.N+1000))
			}
			b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// TestAcquireReleaseNoAlloc keeps the request path allocation-free in the
// ordinary test run (the benchmark reports the same figure).
func TestAcquireReleaseNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c, f := newBenchConn(t, 64)
	allocs := testing.AllocsPerRun(20, func() {
		f.pairs = 256
		c.readLoop()
	})
	if f.bad {
		t.Fatalf("unexpected response %+v", f.badResp)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per 256 acquire/release pairs on an existing key, want 0", allocs)
	}
}
