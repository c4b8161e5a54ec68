package testkit

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/testkit/fault"
	"github.com/ticketing/ticketing/client/wire"
)

var single = []string{"single"}

// faultScenarios run against scripted fake servers and fault proxies.
func faultScenarios() []Scenario {
	return []Scenario{
		{Name: "auth_impostor", Modes: single, Run: scImpostor},
		{Name: "wire_bytes", Modes: single, Run: scWireBytes},
		{Name: "tokens_above_2_53", Modes: single, Run: scBigTokens},
		{Name: "busy_not_retried", Modes: single, Run: scBusy},
		{Name: "moved_followed", Modes: single, Run: scMovedFollowed},
		{Name: "moved_hop_limit", Modes: single, Run: scMovedEndless},
		{Name: "drop_reply_indeterminate", Modes: single, Run: scDropReply},
		{Name: "garbage", Modes: single, Run: scGarbage},
		{Name: "release_retry_bounded", Modes: single, Run: scReleaseRetry},
		{Name: "cancel_race_compensated", Modes: single, Run: scCancelRace},
		{Name: "two_connections", Modes: single, Run: scTwoConns},
		{Name: "backoff_schedule", Modes: single, Run: scBackoff},
		{Name: "proxy_drop_reply", Modes: single, Run: scProxyDropReply},
		{Name: "proxy_cut_after_write", Modes: single, Run: scProxyCutAfterWrite},
		{Name: "deadline_from_send_time", Modes: single, Run: scProxyDelay},
		{Name: "wait_bounds_connecting", Modes: single, Run: scWaitBoundsConnect},
	}
}

const fakeToken = "testkit-fake-token"

// startFake starts f with n listeners.
func startFake(t *T, f *fault.Fake, n int) []string {
	var addrs []string
	for range n {
		a, err := f.AddListener()
		t.Check(err)
		addrs = append(addrs, a)
	}
	t.Cleanup(f.Close)
	return addrs
}

// granter answers A with G (tokens from next), R with O, C with N.
type granter struct {
	next atomic.Uint64
}

func (g *granter) handle(c *fault.Conn, r fault.Req) {
	switch r.Op {
	case wire.OpAcquire:
		c.Send(wire.AppendGranted(nil, r.ReqID, g.next.Add(1), 0))
	case wire.OpRelease:
		c.Send(wire.AppendStatus(nil, wire.StatusReleased, 0, r.ReqID))
	case wire.OpCancel:
		c.Send(wire.AppendStatus(nil, wire.StatusNotHolder, 0, r.ReqID))
	case wire.OpPing:
		c.Send(wire.AppendPong(nil, r.ReqID, uint64(time.Now().UnixMicro())))
	}
}

func newGranter(start uint64) *granter {
	g := &granter{}
	g.next.Store(start)
	return g
}

// waitFor polls cond every 10 ms until it holds or within passes.
func waitFor(within time.Duration, cond func() bool) bool {
	end := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func scImpostor(t *T) {
	none := byte(0)
	cases := []struct {
		name string
		f    *fault.Fake
		code int
	}{
		{"a server claiming no tokens (it cannot prove ours)", &fault.Fake{Flags: &none, AcceptAny: true, ProofKey: []byte{}}, 0},
		{"a server proving with a wrong key", &fault.Fake{Token: fakeToken, AcceptAny: true, ProofKey: []byte("not-the-token")}, 0},
		{"REJECT AUTH_FAILED", &fault.Fake{Token: fakeToken, Reject: wire.CodeAuthFailed}, int(wire.CodeAuthFailed)},
	}
	for _, c := range cases {
		c.f.Handler = newGranter(1).handle
		addrs := startFake(t, c.f, 1)
		d := t.Driver(t.Lang)
		r := d.Connect(addrs, fakeToken, nil, 5000)
		t.Expect(r, c.name, "auth")
		if c.code != 0 && r.Code != c.code {
			t.Fatalf("%s: want code %d, got %s", c.name, c.code, r)
		}
		if c.f.Count(wire.OpAcquire) != 0 {
			t.Fatalf("%s: a request was sent to an unauthenticated server", c.name)
		}
	}
	// The genuine fake is accepted.
	f := &fault.Fake{Token: fakeToken, Handler: newGranter(1).handle}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	d.MustAcquire("k", 1000, 0)
}

// scWireBytes: the client's A, R and C frames are byte-identical to the
// reference codec's encoding (client/wire, the golden vectors' source).
func scWireBytes(t *T) {
	var mu sync.Mutex
	hold := map[uint32]*fault.Conn{}
	g := newGranter(41)
	f := &fault.Fake{Token: fakeToken, Handler: func(c *fault.Conn, r fault.Req) {
		if r.Op == wire.OpAcquire && r.Key == "golden/cancel" {
			mu.Lock()
			hold[r.ReqID] = c
			mu.Unlock()
			return
		}
		if r.Op == wire.OpCancel {
			c.Send(wire.AppendStatus(nil, wire.StatusReleased, 0, r.ReqID)) // withdrawn
			mu.Lock()
			if hc := hold[r.Target()]; hc != nil {
				hc.Send(wire.AppendStatus(nil, wire.StatusTimeout, 0, r.Target()))
			}
			mu.Unlock()
			return
		}
		g.handle(c, r)
	}}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	key := "golden/ключ-✓"
	gr := d.MustAcquire(key, 12345, 678)
	d.MustRelease(key, gr.Token)
	p := d.Send(AcquireCmd("golden/cancel", 1000, 20000))
	if !waitFor(10*time.Second, func() bool { return f.Count(wire.OpAcquire) == 2 }) {
		t.Fatalf("the second acquire never reached the server")
	}
	d.Call(map[string]any{"cmd": "cancel", "target": p.ID}, 5*time.Second)
	r, err := p.Wait(5 * time.Second)
	t.Check(err)
	t.Expect(r, "cancelled acquire", "cancelled")
	if !waitFor(5*time.Second, func() bool { return f.Count(wire.OpCancel) == 1 }) {
		t.Fatalf("no C frame reached the server after cancel")
	}
	var acqID uint32
	for _, q := range f.Requests() {
		var want []byte
		switch {
		case q.Op == wire.OpAcquire && q.Key == key:
			want = wire.AppendAcquire(nil, q.ReqID, key, 12345, 678)
		case q.Op == wire.OpAcquire:
			acqID = q.ReqID
			want = wire.AppendAcquire(nil, q.ReqID, "golden/cancel", 1000, q.WaitMS())
			if q.WaitMS() > 20000 || q.WaitMS() < 15000 {
				t.Fatalf("acquire wait_ms %d, want about 20000", q.WaitMS())
			}
		case q.Op == wire.OpRelease:
			want = wire.AppendRelease(nil, q.ReqID, key, 42)
		case q.Op == wire.OpCancel:
			want = wire.AppendCancel(nil, q.ReqID, "golden/cancel", acqID)
		default:
			continue
		}
		if !bytes.Equal(q.Raw, want) {
			t.Fatalf("%c frame:\n got  %x\n want %x", q.Op, q.Raw, want)
		}
	}
}

func scBigTokens(t *T) {
	toks := []uint64{1<<53 + 1, 1<<63 + 12345, 1<<64 - 2}
	var i atomic.Int64
	f := &fault.Fake{Token: fakeToken, Handler: func(c *fault.Conn, r fault.Req) {
		switch r.Op {
		case wire.OpAcquire:
			c.Send(wire.AppendGranted(nil, r.ReqID, toks[int(i.Add(1)-1)%len(toks)], 0))
		case wire.OpRelease:
			st := wire.StatusNotHolder
			for _, tk := range toks {
				if r.Token() == tk {
					st = wire.StatusReleased
				}
			}
			c.Send(wire.AppendStatus(nil, st, 0, r.ReqID))
		}
	}}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	for _, want := range toks {
		g := d.MustAcquire("big", 1000, 0)
		if g.Token != strconv.FormatUint(want, 10) {
			t.Fatalf("token %q, want exactly %d", g.Token, want)
		}
		d.MustRelease("big", g.Token)
	}
	for _, q := range f.Requests() {
		if q.Op == wire.OpRelease && q.Token() != toks[0] && q.Token() != toks[1] && q.Token() != toks[2] {
			t.Fatalf("release sent token %d, not one that was granted", q.Token())
		}
	}
}

func scBusy(t *T) {
	f := &fault.Fake{Token: fakeToken, Handler: func(c *fault.Conn, r fault.Req) {
		if r.Op == wire.OpAcquire {
			c.Send(wire.AppendStatus(nil, wire.StatusBusy, wire.CodeQueueFull, r.ReqID))
		}
	}}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	p := d.Send(AcquireCmd("k", 1000, 5000))
	r, err := p.Wait(20 * time.Second)
	t.Check(err)
	t.Expect(r, "B QUEUE_FULL", "busy")
	if r.Code != int(wire.CodeQueueFull) {
		t.Fatalf("busy: want code %d (QUEUE_FULL), got %s", wire.CodeQueueFull, r)
	}
	if el := r.At.Sub(p.Sent); el > 2500*time.Millisecond {
		t.Fatalf("busy answered after %v of a 5 s wait: B must be returned at once", el)
	}
	time.Sleep(500 * time.Millisecond)
	if n := f.Count(wire.OpAcquire); n != 1 {
		t.Fatalf("the server saw %d acquires: B must never be retried", n)
	}
}

// movingFake starts a fake server with two listeners whose first one (a
// follower) answers op with M naming the second (the leader); everything
// else, on either, is served by a granter whose first token is first+1.
func movingFake(t *T, op wire.Op, first uint64) (*fault.Fake, []string) {
	var leader string
	f := &fault.Fake{Token: fakeToken}
	g := newGranter(first)
	f.Handler = func(c *fault.Conn, r fault.Req) {
		if r.Op == op && c.Listener == 0 {
			c.Send(wire.AppendMoved(nil, r.ReqID, leader))
			return
		}
		g.handle(c, r)
	}
	addrs := startFake(t, f, 2)
	leader = addrs[1]
	return f, addrs
}

func scMovedFollowed(t *T) {
	f, addrs := movingFake(t, wire.OpAcquire, 4241)
	d := t.Driver(t.Lang)
	d.MustConnect(addrs[:1], fakeToken, nil)
	gr := d.MustAcquire("k", 1000, 5000)
	if gr.Token != "4242" {
		t.Fatalf("token %s, want 4242 from the leader", gr.Token)
	}
	d.MustRelease("k", gr.Token)
	n0 := 0
	for _, q := range f.Requests() {
		if q.Op == wire.OpAcquire && q.Conn.Listener == 0 {
			n0++
		}
	}
	if n0 > 1 {
		t.Fatalf("the follower was asked %d times; after M the client must go to the leader", n0)
	}
}

// scMovedEndless: two nodes naming each other forever: the client follows a
// bounded number of hops, backs off, and gives up definitely within the wait.
func scMovedEndless(t *T) {
	var addrs []string
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		if r.Op == wire.OpAcquire {
			c.Send(wire.AppendMoved(nil, r.ReqID, addrs[1-c.Listener]))
		}
	}
	addrs = startFake(t, f, 2)
	d := t.Driver(t.Lang)
	d.MustConnect(addrs, fakeToken, nil)
	p := d.Send(AcquireCmd("k", 1000, 1500))
	r, err := p.Wait(20 * time.Second)
	t.Check(err)
	// testkit.md names no kind for "no leader within the hop limit": any
	// definite not-acquired kind is accepted.
	t.Expect(r, "endless M", "timeout", "busy", "connect")
	if el := r.At.Sub(p.Sent); el > 6*time.Second {
		t.Fatalf("endless M answered after %v of a 1.5 s wait", el)
	}
	if n := f.Count(wire.OpAcquire); n > 200 {
		t.Fatalf("%d acquires in 1.5 s: M must be followed with a hop limit and a back-off, not in a loop", n)
	}
}

// scDropReply: the first acquire is never answered and its connection is
// cut: indeterminate, and never sent again.
func scDropReply(t *T) {
	var first atomic.Bool
	g := newGranter(100)
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		if r.Op == wire.OpAcquire && first.CompareAndSwap(false, true) {
			go func() { time.Sleep(150 * time.Millisecond); c.Close() }()
			return
		}
		g.handle(c, r)
	}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	r := d.Acquire("k", 10000, 5000)
	t.Expect(r, "a reply lost with its connection", "indeterminate")
	time.Sleep(time.Second)
	if n := f.Count(wire.OpAcquire); n != 1 {
		t.Fatalf("the server saw %d acquires: an indeterminate acquire must never be resent", n)
	}
	// The client still works.
	gr := d.MustAcquire("k2", 1000, 0)
	d.MustRelease("k2", gr.Token)
}

func scGarbage(t *T) {
	var first atomic.Bool
	g := newGranter(200)
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		if r.Op == wire.OpAcquire && first.CompareAndSwap(false, true) {
			c.Send(bytes.Repeat([]byte{0xff}, 16))
			return
		}
		g.handle(c, r)
	}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	r := d.Acquire("k", 10000, 5000)
	t.Expect(r, "a garbage reply", "protocol", "indeterminate")
	time.Sleep(time.Second)
	if n := f.Count(wire.OpAcquire); n != 1 {
		t.Fatalf("the server saw %d acquires after a garbage reply: must not be resent", n)
	}
	gr := d.MustAcquire("k2", 1000, 0)
	d.MustRelease("k2", gr.Token)
	// A garbage handshake.
	hf := &fault.Fake{Hello: []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")}
	d2 := t.Driver(t.Lang)
	r = d2.Connect(startFake(t, hf, 1), fakeToken, nil, 3000)
	t.Expect(r, "a garbage HELLO", "protocol", "connect")
}

// scReleaseRetry: the server never answers a release and drops the
// connection: the client retries, never reports success, and gives up after
// about 5 s.
func scReleaseRetry(t *T) {
	g := newGranter(300)
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		if r.Op == wire.OpRelease {
			go func() { time.Sleep(100 * time.Millisecond); c.Close() }()
			return
		}
		g.handle(c, r)
	}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	gr := d.MustAcquire("k", 30000, 0)
	p := d.Send(map[string]any{"cmd": "release", "key": "k", "token": gr.Token})
	r, err := p.Wait(30 * time.Second)
	t.Check(err)
	if r.OK {
		t.Fatalf("release reported success without O: %s", r)
	}
	t.Expect(r, "a release never answered", "indeterminate")
	el := r.At.Sub(p.Sent)
	if el > 10*time.Second {
		t.Fatalf("release gave up after %v: at most ~5 s", el)
	}
	if n := f.Count(wire.OpRelease); n < 2 {
		t.Fatalf("the release was sent %d time(s) in %v: it must be retried after a lost connection", n, el)
	}
}

// scCancelRace: the grant wins the race with the cancel: the acquire
// answers cancelled and the client releases the grant itself.
func scCancelRace(t *T) {
	const tok = 777
	var mu sync.Mutex
	pend := map[uint32]bool{}
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		switch r.Op {
		case wire.OpAcquire:
			mu.Lock()
			pend[r.ReqID] = true
			mu.Unlock()
		case wire.OpCancel:
			mu.Lock()
			ok := pend[r.Target()]
			delete(pend, r.Target())
			mu.Unlock()
			if ok {
				c.Send(wire.AppendGranted(nil, r.Target(), tok, 1))
			}
			c.Send(wire.AppendStatus(nil, wire.StatusNotHolder, 0, r.ReqID))
		case wire.OpRelease:
			st := wire.StatusNotHolder
			if r.Token() == tok {
				st = wire.StatusReleased
			}
			c.Send(wire.AppendStatus(nil, st, 0, r.ReqID))
		}
	}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	p := d.Send(AcquireCmd("k", 30000, 30000))
	if !waitFor(10*time.Second, func() bool { return f.Count(wire.OpAcquire) == 1 }) {
		t.Fatalf("the acquire never reached the server")
	}
	d.Call(map[string]any{"cmd": "cancel", "target": p.ID}, 5*time.Second)
	r, err := p.Wait(5 * time.Second)
	t.Check(err)
	t.Expect(r, "an acquire cancelled while its grant was in flight", "cancelled")
	ok := waitFor(6*time.Second, func() bool {
		for _, q := range f.Requests() {
			if q.Op == wire.OpRelease && q.Key == "k" && q.Token() == tok {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("the grant that won the race (token %d) was never released by the client", tok)
	}
}

func scTwoConns(t *T) {
	f := &fault.Fake{Token: fakeToken, Handler: newGranter(1).handle}
	addrs := startFake(t, f, 3)
	d := t.Driver(t.Lang)
	d.MustConnect(addrs[:1], fakeToken, nil)
	if !waitFor(5*time.Second, func() bool { return f.Handshakes(0) >= 2 }) {
		t.Fatalf("one address: %d connection(s), want 2", f.Handshakes(0))
	}
	d2 := t.Driver(t.Lang)
	d2.MustConnect(addrs[1:], fakeToken, nil)
	waitFor(10*time.Second, func() bool { return f.Handshakes(1) >= 1 && f.Handshakes(2) >= 1 })
	time.Sleep(500 * time.Millisecond)
	if a, b, c := f.Handshakes(0), f.Handshakes(1), f.Handshakes(2); a != 2 || b != 1 || c != 1 {
		t.Fatalf("connections: single address %d (want 2); two addresses %d and %d (want 1 each)", a, b, c)
	}
	d.MustAcquire("k", 1000, 0)
}

// scBackoff: after a loss, reconnect attempts (refused at once) are spaced
// by the steps 0.1, 0.2, 0.4 … s, capped at 3.2 s, each interval drawn from
// [0, step] (full jitter, architecture.md R16; the bound allows ±50 % of
// the step beyond it and 0.5 s of scheduling on a loaded machine), and not in a hot loop: of the
// last four (steps 1.6 and 3.2 s) at least one is 0.3 s or more (by chance
// all four below: p ≈ 1.5e-4).
func scBackoff(t *T) {
	f := &fault.Fake{Token: fakeToken, Handler: newGranter(1).handle, Accept: func(_, n int) bool { return n == 0 }}
	addrs := startFake(t, f, 2) // two addresses: one connection each, one schedule per listener
	d := t.Driver(t.Lang)
	d.MustConnect(addrs, fakeToken, nil)
	if !waitFor(10*time.Second, func() bool { return f.Handshakes(0) == 1 && f.Handshakes(1) == 1 }) {
		t.Fatalf("connections: %d and %d, want 1 each", f.Handshakes(0), f.Handshakes(1))
	}
	time.Sleep(200 * time.Millisecond)
	loss := time.Now()
	f.CutAll()
	steps := []float64{0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 3.2, 3.2}
	if !waitFor(40*time.Second, func() bool { return len(f.Accepts(0)) > len(steps) && len(f.Accepts(1)) > len(steps) }) {
		t.Fatalf("reconnect attempts after 40 s: %d and %d, want %d each", len(f.Accepts(0))-1, len(f.Accepts(1))-1, len(steps))
	}
	for l := range 2 {
		acc := f.Accepts(l)[1:]
		prev := loss
		var got []string
		bad := ""
		longest := 0.0
		for i, step := range steps {
			iv := acc[i].Sub(prev).Seconds()
			got = append(got, fmt.Sprintf("%.3f", iv))
			if iv > 1.5*step+0.5 && bad == "" {
				bad = fmt.Sprintf("attempt %d came %.3f s after the previous, want at most its step %.2f s (+50%% +0.5 s)", i+1, iv, step)
			}
			if i >= len(steps)-4 {
				longest = max(longest, iv)
			}
			prev = acc[i]
		}
		if longest < 0.3 && bad == "" {
			bad = "the last four attempts came less than 0.3 s apart: no backoff"
		}
		if bad != "" {
			t.Fatalf("address %d: %s (intervals %v)", l, bad, got)
		}
	}
}

// proxied starts a parsing proxy to the single server.
func proxied(t *T) *fault.Proxy {
	p, err := fault.Listen(t.Env.Addrs[0], true)
	t.Check(err)
	t.Cleanup(p.Close)
	return p
}

// scProxyDropReply: the real server grants, the proxy drops the G and cuts:
// indeterminate (the lock is in fact held), never resent.
func scProxyDropReply(t *T) {
	k := t.Key("k")
	p := proxied(t)
	var mu sync.Mutex
	ids := map[[2]uint64]bool{}
	p.OnRequest = func(f *fault.Frame) fault.Verdict {
		if f.Req.Op == wire.OpAcquire && string(f.Req.Key) == k {
			mu.Lock()
			ids[[2]uint64{uint64(f.Link), uint64(f.Req.ReqID)}] = true
			mu.Unlock()
		}
		return fault.Pass
	}
	p.OnResponse = func(f *fault.Frame) fault.Verdict {
		mu.Lock()
		defer mu.Unlock()
		if ids[[2]uint64{uint64(f.Link), uint64(f.Resp.ReqID)}] && f.Resp.Status == wire.StatusGranted {
			return fault.DropAndCut
		}
		return fault.Pass
	}
	p.Start()
	d := t.Driver(t.Lang)
	d.MustConnect([]string{p.Addr()}, t.Env.Token, nil)
	r := d.Acquire(k, 30000, 0)
	t.Expect(r, "a dropped G", "indeterminate")
	o := t.Connected(t.Lang)
	t.Expect(o.Acquire(k, 1000, 0), "the key granted to the indeterminate acquire", "timeout")
	time.Sleep(time.Second)
	n := 0
	for _, f := range p.Requests() {
		if f.Req.Op == wire.OpAcquire && string(f.Req.Key) == k {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the acquire went through the proxy %d times: never resend an indeterminate acquire", n)
	}
}

// scProxyCutAfterWrite: the connection is cut right after the acquire was
// forwarded to the server: indeterminate.
func scProxyCutAfterWrite(t *T) {
	k := t.Key("k")
	p := proxied(t)
	var cut atomic.Bool
	p.OnRequest = func(f *fault.Frame) fault.Verdict {
		if f.Req.Op == wire.OpAcquire && string(f.Req.Key) == k && cut.CompareAndSwap(false, true) {
			return fault.PassAndCut
		}
		return fault.Pass
	}
	p.Start()
	d := t.Driver(t.Lang)
	d.MustConnect([]string{p.Addr()}, t.Env.Token, nil)
	r := d.Acquire(k, 2000, 0)
	t.Expect(r, "a connection cut after the request was written", "indeterminate")
	// The client reconnects and works.
	k2 := t.Key("k2")
	g := d.MustAcquire(k2, 1000, 5000)
	d.MustRelease(k2, g.Token)
}

// scProxyDelay: with replies delayed 500 ms, the local deadline counts from
// the send time, so it is at least the delay short of the lease.
func scProxyDelay(t *T) {
	k := t.Key("k")
	p := proxied(t).Start()
	d := t.Driver(t.Lang)
	d.MustConnect([]string{p.Addr()}, t.Env.Token, nil)
	p.Delay(500 * time.Millisecond)
	const lease = 10000
	r := d.MustAcquire(k, lease, 0)
	if r.DeadlineInMS == nil {
		t.Fatalf("no deadline_in_ms: %s", r)
	}
	if dl := *r.DeadlineInMS; dl > lease-400 || dl < lease-3000 {
		t.Fatalf("deadline_in_ms %d with a 500 ms reply delay and lease %d: want %d..%d (from the send time)", dl, lease, lease-3000, lease-400)
	}
	p.Delay(0)
	d.MustRelease(k, r.Token)
}

// scWaitBoundsConnect: while the connection is being re-established, an
// acquire's wait still bounds the whole call.
func scWaitBoundsConnect(t *T) {
	k := t.Key("k")
	h := t.Connected(t.Lang)
	g := h.MustAcquire(k, 60000, 0)
	p := proxied(t).Start()
	d := t.Driver(t.Lang)
	if r := d.Connect([]string{p.Addr()}, t.Env.Token, nil, 800); !r.OK {
		t.Fatalf("connect: %s", r)
	}
	p.Blackhole(true)
	p.Cut()
	time.Sleep(50 * time.Millisecond)
	const wait = 3000
	pd := d.Send(AcquireCmd(k, 5000, wait))
	time.Sleep(1200 * time.Millisecond)
	p.Blackhole(false)
	r, err := pd.Wait(30 * time.Second)
	t.Check(err)
	t.Expect(r, "an acquire on a held key while reconnecting", "timeout", "connect")
	if el := r.At.Sub(pd.Sent); el > wait*time.Millisecond+1500*time.Millisecond {
		t.Fatalf("answered after %v: the %d ms wait bounds the whole call, connecting included", el, wait)
	}
	h.MustRelease(k, g.Token)
}
