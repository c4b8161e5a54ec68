package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

func TestKeys(t *testing.T) {
	var k [KeyLen]byte
	putKey(&k, 42)
	if string(k[:]) != "bench:0000000042" {
		t.Fatalf("putKey: %q", k)
	}
	putHotKey(&k, 7)
	if string(k[:]) != "bench:h000000007" {
		t.Fatalf("putHotKey: %q", k)
	}
	if !wire.ValidKey(k[:]) {
		t.Fatal("generated keys must be valid protocol keys")
	}
}

// Every key of the space is visited, each by exactly one slot (pairs: the
// slots' partitions are disjoint, so keys are always free; fill: once each).
func TestPartitions(t *testing.T) {
	for _, mode := range []Mode{ModePairs, ModeFill} {
		for _, tc := range []struct{ conns, pipeline, keys int }{{2, 3, 20}, {3, 4, 12}, {1, 1, 5}, {4, 8, 1000}} {
			cfg := DefaultConfig()
			cfg.Mode, cfg.Conns, cfg.Pipeline, cfg.Keys = mode, tc.conns, tc.pipeline, tc.keys
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			sh := &shared{cfg: &cfg, total: uint64(cfg.slotsTotal())}
			owner := map[uint64]uint64{}
			for c := 0; c < cfg.Conns; c++ {
				w := newWorker(sh, nil, c)
				for i := range w.slots {
					g := w.first + uint64(i)
					for n := 0; n < cfg.Keys && w.nextKey(i); n++ {
						k := w.slots[i].keyIdx
						if o, ok := owner[k]; ok && o != g {
							t.Fatalf("%s %+v: key %d visited by slots %d and %d", mode, tc, k, o, g)
						}
						owner[k] = g
					}
				}
			}
			if len(owner) != cfg.Keys {
				t.Fatalf("%s %+v: %d of %d keys visited", mode, tc, len(owner), cfg.Keys)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.Mode = "x" },
		func(c *Config) { c.Conns = 0 },
		func(c *Config) { c.Pipeline = MaxPipeline + 1 },
		func(c *Config) { c.Keys = 0 },
		func(c *Config) { c.Contention = 1.5 },
		func(c *Config) { c.Lease = 0 },
		func(c *Config) { c.Duration, c.Ops = 0, 0 },
		func(c *Config) { c.Mode, c.HotKeys = ModeTry, 1 },
		func(c *Config) { c.SetSize = 0 },
		func(c *Config) { c.SetSize = wire.MaxSetKeys + 1 },
		func(c *Config) { c.Mode, c.SetSize = ModeFill, 2 },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("case %d: want an error", i)
		}
	}
	c := DefaultConfig()
	c.Contention = 0.5
	if err := c.Validate(); err != nil || c.HotKeys != 1 {
		t.Fatalf("contention implies one hot key: %v %d", err, c.HotKeys)
	}
}

// A set's S and X are byte for byte the wire encoders' frames (protocol.md
// §12.2), with distinct members; a worker with SetSize N sends them.
func TestSetFrames(t *testing.T) {
	var k [KeyLen]byte
	putKey(&k, 42)
	keys := []string{"bench:0000000042", "bencha0000000042", "benchb0000000042"}
	if got, want := appendSetReq(nil, wire.OpAcquireSet, 7, &k, 3, setSpan{}, wire.AcquireArg(30000, 5)), wire.AppendAcquireSet(nil, 7, keys, 30000, 5); !bytes.Equal(got, want) {
		t.Fatalf("S:\n got %x\nwant %x", got, want)
	}
	if got, want := appendSetReq(nil, wire.OpReleaseSet, 8, &k, 3, setSpan{}, 99), wire.AppendReleaseSet(nil, 8, keys, 99); !bytes.Equal(got, want) {
		t.Fatalf("X:\n got %x\nwant %x", got, want)
	}
	full := appendSetReq(nil, wire.OpAcquireSet, 1, &k, wire.MaxSetKeys, setSpan{}, 0)
	var ks wire.KeySet
	if code, msg := wire.ParseKeySet(&ks, wire.MaxSetKeys, full[wire.HeaderLen:]); code != wire.CodeNone {
		t.Fatalf("a %d-key set does not parse: %v %s", wire.MaxSetKeys, code, msg)
	}

	cfg := DefaultConfig()
	cfg.Conns, cfg.Pipeline, cfg.SetSize = 1, 2, 3
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := newWorker(&shared{cfg: &cfg, total: 2, leaseArg: wire.AcquireArg(30000, 0)}, discardConn{}, 0)
	w.start()
	// members from the slot's own share of the --keys keys (2 slots: the even keys)
	want := wire.AppendAcquireSet(nil, 0, []string{"bench:0000000000", "bench:0000000002", "bench:0000000004"}, 30000, 0)
	if len(w.wbuf) < len(want) || !bytes.Equal(w.wbuf[:len(want)], want) {
		t.Fatalf("first acquire of a set-size 3 worker:\n got %x\nwant %x", w.wbuf, want)
	}
}

// A set's members are keys of its slot's own share of --keys, wrapping
// within it (issue 35: the set row touches the keys the single-key row
// does); a share smaller than a set, or a hot key, falls back to setMark.
func TestSetMembers(t *testing.T) {
	members := func(sp setSpan, idx uint64, n int) []string {
		var k, m [KeyLen]byte
		putKey(&k, idx)
		out := []string{string(k[:])}
		for j := 1; j < n; j++ {
			sp.member(&m, &k, n, j)
			out = append(out, string(m[:]))
		}
		return out
	}
	sp := setSpan{total: 4, keys: 10} // slot 1's share: 1, 5, 9
	if got := members(sp, 5, 3); !slices.Equal(got, []string{"bench:0000000005", "bench:0000000009", "bench:0000000001"}) {
		t.Fatalf("members of 5: %q", got)
	}
	if got := members(sp, 3, 2); !slices.Equal(got, []string{"bench:0000000003", "bench:0000000007"}) { // slot 3: 3, 7
		t.Fatalf("members of 3: %q", got)
	}
	if got := members(sp, 3, 3); !slices.Equal(got, []string{"bench:0000000003", "bencha0000000003", "benchb0000000003"}) {
		t.Fatalf("share of 2 keys, set of 3: %q", got)
	}
	var h, m [KeyLen]byte
	putHotKey(&h, 7)
	sp.member(&m, &h, 2, 1)
	if string(m[:]) != "benchah000000007" {
		t.Fatalf("hot key member %q", m)
	}
	cfg := DefaultConfig()
	cfg.Keys = 3
	if span(&cfg, 4) != (setSpan{}) {
		t.Fatal("fewer keys than slots: members by setMark")
	}
}

// discardConn is a net.Conn whose writes vanish (the encode/decode loop
// benchmark needs no server).
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }

// loopFixture is a worker with every slot's acquire in flight, and the two
// response batches that drive a full round: G to every acquire, then O to
// every release.
func loopFixture(tb testing.TB, pipeline int) (*worker, []byte, []byte) {
	return loopFixtureSet(tb, pipeline, 1)
}

func loopFixtureSet(tb testing.TB, pipeline, setSize int) (*worker, []byte, []byte) {
	cfg := DefaultConfig()
	cfg.Conns, cfg.Pipeline, cfg.SetSize = 1, pipeline, setSize
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	sh := &shared{cfg: &cfg, total: uint64(pipeline)}
	sh.phase.Store(1)
	w := newWorker(sh, discardConn{}, 0)
	w.phase = 1
	w.start()
	if err := w.flush(); err != nil {
		tb.Fatal(err)
	}
	var grants, releases []byte
	for i := 0; i < pipeline; i++ {
		grants = wire.AppendGranted(grants, uint32(i), 1<<40+uint64(i), 0)
		releases = wire.AppendStatus(releases, wire.StatusReleased, 0, uint32(i))
	}
	return w, grants, releases
}

func loopRound(tb testing.TB, w *worker, grants, releases []byte) {
	for _, b := range [][]byte{grants, releases} {
		if n, err := w.process(b, mono()); err != nil || n != len(b) {
			tb.Fatalf("process: %d of %d bytes, %v", n, len(b), err)
		}
		if err := w.flush(); err != nil {
			tb.Fatal(err)
		}
	}
}

// The generator's per-op path (decode a response, pick the next key, encode
// the follow-up, record latency, write the batch) allocates nothing.
func TestWorkerLoopZeroAllocs(t *testing.T) {
	for _, set := range []int{1, 2, wire.MaxSetKeys} {
		w, g, r := loopFixtureSet(t, 64, set)
		if a := testing.AllocsPerRun(100, func() { loopRound(t, w, g, r) }); a != 0 {
			t.Fatalf("set size %d: %v allocs per round, want 0", set, a)
		}
		if w.ops == 0 || w.outcomes['G'] != w.outcomes['O'] {
			t.Fatalf("set size %d: ops %d outcomes G %d O %d", set, w.ops, w.outcomes['G'], w.outcomes['O'])
		}
	}
}

// BenchmarkWorkerLoop: one op = decoding one response and encoding the next
// request (no syscalls: the connection discards writes).
func BenchmarkWorkerLoop(b *testing.B) {
	const depth = 64
	w, g, r := loopFixture(b, depth)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 2 * depth {
		loopRound(b, w, g, r)
	}
}

// fakeServer speaks the handshake and answers A with G (a rising token),
// R with O, like the floor server but token-correct; it is enough to drive
// Run end to end without the real server.
func fakeServer(t *testing.T) string {
	return fakeServerFunc(t, func(req []byte, tok uint64) bool { return true })
}

// fakeServerFunc is fakeServer asking answer before each request (32
// bytes, with the token a grant would carry): false closes the connection
// without answering it.
func fakeServerFunc(t *testing.T, answer func(req []byte, tok uint64) bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var h wire.Hello
				c.Write(wire.AppendHello(nil, &h))
				a := make([]byte, wire.AuthLen)
				if _, err := io.ReadFull(c, a); err != nil {
					return
				}
				c.Write(wire.AppendWelcome(nil, &wire.Welcome{Status: wire.WelcomeAccepted, MaxInflight: 1024}))
				buf := make([]byte, 32)
				var out []byte
				tok := uint64(1000)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if !answer(buf, tok+1) {
						return
					}
					id := binary.BigEndian.Uint32(buf[4:8])
					if buf[0] == 'A' {
						tok++
						out = wire.AppendGranted(out[:0], id, tok, 0)
					} else {
						out = wire.AppendStatus(out[:0], wire.StatusReleased, 0, id)
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestRunAgainstFake(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Addr = fakeServer(t)
	cfg.Conns, cfg.Pipeline, cfg.Ops, cfg.ServerStats = 2, 4, 500, false
	var progress bytes.Buffer
	cfg.Progress, cfg.ProgressEvery = &progress, time.Millisecond
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops < 500 || r.Errors != 0 || r.Outcomes["G"] != r.Outcomes["O"] || r.OpsPerS <= 0 {
		t.Fatalf("%+v", r)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "throughput") {
		t.Fatalf("text report: %v\n%s", err, text.String())
	}
}

func TestBudgetVerdicts(t *testing.T) {
	mk := func(label string, conns, pipeline int, ops, p99 float64) *Result {
		return &Result{Label: label, Mode: ModePairs, Conns: conns, Pipeline: pipeline, Keys: 10000, OpsPerS: ops,
			Latency: Latency{P50: p99 / 3, P99: p99, Max: 2 * p99}, ServerMem: &ProcMem{RSS: 7 << 20, Peak: 8 << 20}}
	}
	rs := []*Result{
		mk("ticketing", 8, 64, 2_100_000, 900), mk("redis", 8, 64, 450_000, 3000), mk("floor", 8, 64, 4_000_000, 500),
		mk("ticketing", 64, 1, 95_000, 2000), mk("floor", 64, 1, 100_000, 2000),
		mk("ticketing", 1, 1, 20_000, 120), mk("ticketing", 1, 1, 21_000, 140), mk("ticketing", 1, 1, 19_000, 400),
	}
	var b strings.Builder
	if err := WriteBudget(&b, rs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"2,100,000 ops/s", "ticketing = 4.7×", "**met** ops, **met** Redis", // row 1
		"ticketing = 95 % of it | ≥ 90 % of the floor | **met**", // row 2
		"p99 140µs (120µs – 400µs, 3 runs)",                      // row 3: median of the runs
		"8.0 MB",                                                 // RSS
	} {
		if !strings.Contains(out, want) {
			t.Errorf("budget lacks %q:\n%s", want, out)
		}
	}
	rs[1].OpsPerS = 600_000 // ticketing only 3.5× Redis
	b.Reset()
	_ = WriteBudget(&b, rs)
	if !strings.Contains(b.String(), "**missed** Redis") {
		t.Errorf("3.5× Redis must miss:\n%s", b.String())
	}
	var c strings.Builder
	if err := Compare(&c, rs); err != nil || !strings.Contains(c.String(), "0.53 (ticketing ÷ floor)") {
		t.Errorf("compare: %v\n%s", err, c.String())
	}
}

// A connection lost mid-run (the server crashed with a release in flight)
// ends the run with a report that says so, not with an error and nothing:
// the lock whose release was in flight is released on the leader that
// FindLeader names (the probe's finding: kill -9 of the leader left bench
// with no report and locks held until their lease).
func TestRunReportsALostConnection(t *testing.T) {
	var n atomic.Int64
	var lastGrant atomic.Uint64
	crashing := fakeServerFunc(t, func(req []byte, tok uint64) bool {
		switch k := n.Add(1); {
		case k <= 7: // A R A R A R A: answered
			if req[0] == 'A' {
				lastGrant.Store(tok)
			}
			return true
		default: // the 8th, a release: the server dies
			return false
		}
	})
	type rel struct {
		key string
		tok uint64
	}
	released := make(chan rel, 16)
	leader := fakeServerFunc(t, func(req []byte, _ uint64) bool {
		if req[0] == 'R' {
			released <- rel{string(bytes.TrimRight(req[16:32], "\x00")), binary.BigEndian.Uint64(req[8:16])}
		}
		return true
	})
	cfg := DefaultConfig()
	cfg.Addr = crashing
	cfg.Conns, cfg.Pipeline, cfg.Duration, cfg.ServerStats = 1, 1, time.Minute, false
	cfg.FindLeader = func(context.Context) (string, error) { return leader, nil }
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.Lost == "" || !strings.Contains(r.Lost, "connection lost with 1 requests in flight") {
		t.Errorf("lost %q", r.Lost)
	}
	if r.Outcomes["G"] != 4 || r.Outcomes["O"] != 3 {
		t.Errorf("outcomes %v, want the 4 grants and 3 releases before the crash", r.Outcomes)
	}
	select {
	case got := <-released:
		if got.tok != lastGrant.Load() {
			t.Errorf("released token %d on the leader, want %d (the release in flight)", got.tok, lastGrant.Load())
		}
	default:
		t.Errorf("the lock whose release was lost was not released on the leader; note %q", r.Note)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "lost ") {
		t.Errorf("text report lacks the lost line: %v\n%s", err, text.String())
	}
}

// TestFifoGrantGaps: with one hot key and waiting, each grant's read is
// timed against the previous token's (the gap between consecutive grants,
// whichever connection read them), a token whose predecessor was never read
// records no gap, and the path stays allocation-free.
func TestFifoGrantGaps(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Conns, cfg.Pipeline, cfg.HotKeys, cfg.Wait = 2, 1, 1, time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sh := &shared{cfg: &cfg, total: 2, fifo: fifoWorkload(&cfg)}
	if !sh.fifo {
		t.Fatal("one hot key with --wait is the fifo workload")
	}
	sh.phase.Store(1)
	ws := []*worker{newWorker(sh, discardConn{}, 0), newWorker(sh, discardConn{}, 1)}
	for _, w := range ws {
		w.phase = 1
		w.start()
		if err := w.flush(); err != nil {
			t.Fatal(err)
		}
	}
	var g, o []byte
	// grant: w reads G token tok at time at, releases, reads the O.
	grant := func(w *worker, tok uint64, at int64) {
		g = wire.AppendGranted(g[:0], 0, tok, 0)
		o = wire.AppendStatus(o[:0], wire.StatusReleased, 0, 0)
		for _, b := range [][]byte{g, o} {
			if n, err := w.process(b, at); err != nil || n != len(b) {
				t.Fatalf("process: %d of %d bytes, %v", n, len(b), err)
			}
			if err := w.flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	const ms = int64(time.Millisecond)
	grant(ws[0], 10, 1*ms)
	grant(ws[1], 11, 3*ms/2) // gap 0.5 ms
	grant(ws[0], 12, 4*ms)   // gap 2.5 ms
	grant(ws[1], 14, 5*ms)   // 13 never read: no gap
	gaps := newHist()
	for _, w := range ws {
		gaps.Merge(w.gapHist)
	}
	if gaps.TotalCount() != 2 || !gaps.ValuesAreEquivalent(gaps.Min(), ms/2) || !gaps.ValuesAreEquivalent(gaps.Max(), 5*ms/2) {
		t.Fatalf("gaps: count %d min %d max %d; want 2, 0.5 ms, 2.5 ms", gaps.TotalCount(), gaps.Min(), gaps.Max())
	}
	tok, at := uint64(100), 10*ms
	if a := testing.AllocsPerRun(100, func() { tok++; at += ms; grant(ws[tok%2], tok, at) }); a != 0 {
		t.Fatalf("%v allocs per grant, want 0", a)
	}
	if ws[0].gapHist.TotalCount()+ws[1].gapHist.TotalCount() < 100 {
		t.Fatalf("consecutive grants must each record a gap: %d", ws[0].gapHist.TotalCount()+ws[1].gapHist.TotalCount())
	}
}
