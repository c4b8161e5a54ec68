package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/testkit/fault"
	"github.com/ticketing/ticketing/client/wire"
)

// Scenarios of the client edge rules R1–R16 (docs/architecture.md, "Client
// library behaviour"; the rule is the scenario name's prefix) and of the
// protocol 1.1 additions (sets, labels, the TLS hint: protocol.md §12).
func edgeScenarios() []Scenario {
	return []Scenario{
		{Name: "r1_wait_bounds_connect", Modes: single, Run: scR1},
		{Name: "r2_silent_server", Modes: single, Run: scR2},
		{Name: "r3_short_outage", Modes: single, Run: scR3},
		{Name: "r4_wrong_token_fast", Modes: single, Run: scR4},
		{Name: "r5_tls_mismatch", Modes: []string{"tls"}, Run: scR5},
		{Name: "r6_release_twice", Modes: single, Run: scR6},
		{Name: "r7_closed_client", Modes: single, Run: scR7},
		{Name: "r8_bad_input_unsent", Modes: single, Run: scR8},
		{Name: "r10_scope_ends_at_exit", Modes: single, Run: scR10},
		{Name: "r11_cancel_with_lock", Modes: single, Run: scR11},
		{Name: "r12_lease_ending", Modes: single, Run: scR12},
		{Name: "r13_try_acquire", Modes: single, Run: scR13},
		{Name: "r14_min_remaining", Modes: single, Run: scR14},
		{Name: "r15_errors_say_where", Modes: single, Run: scR15},
		{Name: "r16_reconnect_jitter", Modes: single, Run: scR16},
		{Name: "release_moved_followed", Modes: single, Run: scReleaseMoved},
		{Name: "set_fifo_cross_language", Modes: singleCluster, Run: scSetFIFO},
		{Name: "set_expiry_cancel", Modes: singleCluster, Run: scSetExpiryCancel},
		{Name: "label_visible", Modes: singleCluster, Run: scLabel},
	}
}

// Client-side rules do not depend on the deployment: single only (CI time);
// protocol 1.1 state is replicated: single and cluster.
var singleCluster = []string{"single", "cluster"}

// ConnectWith connects with extra fields (label, answer_allowance_ms, …).
func (d *D) ConnectWith(addrs []string, token any, tls any, timeoutMS int, extra map[string]any) Result {
	c := map[string]any{"cmd": "connect", "addrs": addrs, "token": nil, "tls": tls}
	if s, ok := token.(string); ok && s != "" {
		c["token"] = s
	}
	if timeoutMS > 0 {
		c["connect_timeout_ms"] = timeoutMS
	}
	for k, v := range extra {
		c[k] = v
	}
	return d.Call(c, 30*time.Second)
}

func elapsed(p *Pending, r Result) time.Duration { return r.At.Sub(p.Sent) }

// serverDown connects a driver through a proxy to the server (connect
// timeout 5 s), then takes the server "down": the proxy refuses new
// connections and cuts the live ones; it returns once the client has tried
// to reconnect (and been refused).
func serverDown(t *T) (*fault.Proxy, *D) {
	p := proxied(t).Start()
	d := t.Driver(t.Lang)
	if r := d.Connect([]string{p.Addr()}, t.Env.Token, nil, 5000); !r.OK {
		t.Fatalf("connect: %s", r)
	}
	n := len(p.Accepts())
	p.Refuse(true)
	p.Cut()
	if !waitFor(10*time.Second, func() bool { return len(p.Accepts()) > n }) {
		t.Fatalf("the client never tried to reconnect after its connections were cut")
	}
	return p, d
}

// scR1: no connection (the server refuses): wait 0 and wait 1 s fail
// `connect` within their wait (the 5 s connect timeout does not apply), the
// wait-1 s one not before most of its wait; nothing reaches the server.
func scR1(t *T) {
	k := t.Key("k")
	p, d := serverDown(t)
	for _, wait := range []int64{0, 1000} {
		pd := d.Send(AcquireCmd(k, 5000, wait))
		r := t.Wait(pd, 30*time.Second)
		t.Expect(r, fmt.Sprintf("acquire wait %d ms with the server down", wait), "connect")
		el := elapsed(pd, r)
		if el > time.Duration(wait)*time.Millisecond+1500*time.Millisecond {
			t.Fatalf("acquire wait %d ms with the server down answered after %v: the wait bounds the whole call, connecting included (R1)", wait, el)
		}
		if wait > 0 && el < time.Duration(wait)*time.Millisecond*7/10 {
			t.Fatalf("acquire wait %d ms answered `connect` after %v: the wait is spent waiting for a connection (R1)", wait, el)
		}
	}
	p.Refuse(false)
	g := d.MustAcquire(k, 5000, 10000)
	d.MustRelease(k, g.Token)
}

// scR2: a server that takes acquires and never answers them (alive, not
// closing): with answer_allowance_ms 1000, wait 1000 ends `indeterminate`
// between ~2 and ~3.5 s after the write and is withdrawn with C; with the
// client's default allowance (2..5 s), wait 0 ends within 2..6.5 s.
func scR2(t *T) {
	g := newGranter(500)
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		if (r.Op == wire.OpAcquire && strings.HasPrefix(r.Key, "silent/")) || r.Op == wire.OpCancel {
			return // silent (a SIGSTOPped server)
		}
		g.handle(c, r)
	}
	addrs := startFake(t, f, 1)
	d := t.Driver(t.Lang)
	if r := d.ConnectWith(addrs, fakeToken, nil, 0, map[string]any{"answer_allowance_ms": 1000}); !r.OK {
		t.Fatalf("connect with answer_allowance_ms: %s", r)
	}
	pd := d.Send(AcquireCmd("silent/1", 5000, 1000))
	r := t.Wait(pd, 6*time.Second)
	t.Expect(r, "an acquire (wait 1 s, allowance 1 s) the server never answers", "indeterminate")
	if el := elapsed(pd, r); el < 1700*time.Millisecond || el > 3500*time.Millisecond {
		t.Fatalf("answered after %v: want wait 1 s + allowance 1 s from the write (1.7..3.5 s)", el)
	}
	var id uint32
	for _, q := range f.Requests() {
		if q.Op == wire.OpAcquire && q.Key == "silent/1" {
			id = q.ReqID
		}
	}
	if !waitFor(5*time.Second, func() bool {
		for _, q := range f.Requests() {
			if q.Op == wire.OpCancel && q.Target() == id {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the unanswered acquire (req_id %d) was not withdrawn with C", id)
	}
	// The default allowance.
	d2 := t.Driver(t.Lang)
	d2.MustConnect(addrs, fakeToken, nil)
	pd = d2.Send(AcquireCmd("silent/2", 5000, 0))
	r = t.Wait(pd, 8*time.Second)
	t.Expect(r, "a try-once acquire the server never answers (default allowance)", "indeterminate")
	if el := elapsed(pd, r); el < 1800*time.Millisecond || el > 6500*time.Millisecond {
		t.Fatalf("answered after %v: the default answer allowance is between 2 and 5 s", el)
	}
	// The client still works.
	gr := d2.MustAcquire("k", 1000, 0)
	d2.MustRelease("k", gr.Token)
}

// scR3: acquires made while the server is down (refusing) for ~0.8 s, with
// waits that outlast the outage, get the server's real answer (a grant)
// within their wait, not indeterminate.
func scR3(t *T) {
	p, d := serverDown(t)
	var keys []string
	var ps []*Pending
	for i := range 3 {
		k := t.Key(fmt.Sprint(i))
		keys = append(keys, k)
		ps = append(ps, d.Send(AcquireCmd(k, 10000, 6000)))
	}
	time.Sleep(800 * time.Millisecond) // the outage's length, not an ordering
	p.Refuse(false)
	for i, pd := range ps {
		r := t.Wait(pd, 30*time.Second)
		if !r.OK {
			t.Fatalf("acquire %d made during a 0.8 s outage (wait 6 s): want the server's grant, got %s", i, r)
		}
		if el := elapsed(pd, r); el > 7500*time.Millisecond {
			t.Fatalf("acquire %d granted after %v, beyond its 6 s wait", i, el)
		}
		d.MustRelease(keys[i], r.Token)
	}
}

// scR4: a wrong token fails `auth` at once (connect timeout 6 s); a token
// rotated on the server while connected makes a waiting call fail `auth`
// as soon as the reconnect is rejected, not at the end of its wait.
func scR4(t *T) {
	bad := &fault.Fake{Token: fakeToken, Reject: wire.CodeAuthFailed}
	d := t.Driver(t.Lang)
	start := time.Now()
	r := d.Connect(startFake(t, bad, 1), fakeToken, nil, 6000)
	t.Expect(r, "connect answered REJECT AUTH_FAILED", "auth")
	if el := r.At.Sub(start); el > 3*time.Second {
		t.Fatalf("connect with a rejected token failed after %v (connect timeout 6 s): want at once", el)
	}
	f := &fault.Fake{Token: fakeToken, Handler: newGranter(1).handle}
	d = t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	f.SetReject(wire.CodeAuthFailed)
	// Every connection the client had is cut; the acquire is sent once each
	// of them has dialled again (and met the REJECT), so that it waits for a
	// connection instead of racing the client's noticing of the cut (a
	// request written into a connection that then ends is rightly
	// indeterminate).
	n := len(f.Accepts(0))
	f.CutAll()
	if !waitFor(10*time.Second, func() bool { return len(f.Accepts(0)) >= 2*n }) {
		t.Fatalf("the client did not dial again after its %d connections were cut", n)
	}
	pd := d.Send(AcquireCmd("k", 1000, 6000))
	r = t.Wait(pd, 20*time.Second)
	t.Expect(r, "an acquire waiting for a connection the server rejects (token rotated)", "auth")
	if el := elapsed(pd, r); el > 3*time.Second {
		t.Fatalf("failed after %v of its 6 s wait: want as soon as the server answers REJECT AUTH_FAILED", el)
	}
	if n := f.Count(wire.OpAcquire); n != 0 {
		t.Fatalf("%d acquires reached a server that rejects the token", n)
	}
}

// scR5 (mode tls; also the 1.1 TLS hint): a plaintext client against the
// TLS server fails `tls` within 5 s ("requires TLS", protocol.md §12.4:
// the hint comes after 1 s of silence; the bound stays below the 6 s connect
// timeout, so a client that waits that out fails, with room for a loaded CI),
// and a TLS client against a plaintext server fails `tls` before its connect
// timeout too ("does not speak TLS": at once, but a TLS stack's setup can
// take seconds on a loaded machine); both with a 6 s connect timeout.
func scR5(t *T) {
	d := t.Driver(t.Lang)
	start := time.Now()
	r := d.Connect(t.Env.Addrs, t.Env.Token, nil, 6000)
	t.Expect(r, "a plaintext client to a TLS server", "tls")
	if el := r.At.Sub(start); el > 5*time.Second {
		t.Fatalf("plaintext to TLS failed after %v: the server's TLS_REQUIRED hint comes after 1 s", el)
	}
	if !strings.Contains(strings.ToLower(r.Message), "tls") {
		t.Fatalf("the error does not say TLS is required: %s", r)
	}
	f := &fault.Fake{Token: t.Env.Token, Handler: newGranter(1).handle}
	d = t.Driver(t.Lang)
	start = time.Now()
	r = d.Connect(startFake(t, f, 1), t.Env.Token, t.Env.TLSSpec(), 6000)
	t.Expect(r, "a TLS client to a plaintext server", "tls")
	if el := r.At.Sub(start); el > 5*time.Second {
		t.Fatalf("TLS to plaintext failed after %v: want at once, before the 6 s connect timeout", el)
	}
	if !strings.Contains(strings.ToLower(r.Message), "tls") {
		t.Fatalf("the error does not say the server does not speak TLS: %s", r)
	}
}

// scR6: the second release of one lease object is a no-op that says so;
// release(key, token) of that lock (no longer held) answers not_holder.
func scR6(t *T) {
	d, o := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := d.MustAcquire(k, 30000, 0)
	rel := map[string]any{"cmd": "release_lease", "token": g.Token}
	r := d.Call(rel, 20*time.Second)
	if !r.OK || !strings.Contains(string(r.Raw), `"already":false`) {
		t.Fatalf("first release_lease: want {\"already\": false}, got %s", r)
	}
	r = d.Call(rel, 20*time.Second)
	if !r.OK || !strings.Contains(string(r.Raw), `"already":true`) {
		t.Fatalf("second release_lease of the same lease: want ok {\"already\": true} (a no-op), got %s", r)
	}
	t.Expect(d.Release(k, g.Token), "release(key, token) of a lock not held", "not_holder")
	g2 := o.MustAcquire(k, 10000, 0)
	o.MustRelease(k, g2.Token)
}

// scR7: after close, release (of a held lock), release_lease and acquire
// fail `closed` at once — not indeterminate: nothing was sent, and the lock
// is still held.
func scR7(t *T) {
	d, o := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := d.MustAcquire(k, 30000, 0)
	if c := d.Call(map[string]any{"cmd": "close"}, 15*time.Second); !c.OK {
		t.Fatalf("close: %s", c)
	}
	for _, c := range []map[string]any{
		{"cmd": "release", "key": k, "token": g.Token},
		{"cmd": "release_lease", "token": g.Token},
		AcquireCmd(t.Key("after"), 1000, 1000),
	} {
		p := d.Send(c)
		r := t.Wait(p, 20*time.Second)
		t.Expect(r, cmdString(c)+" on a closed client", "closed")
		if el := elapsed(p, r); el > time.Second {
			t.Fatalf("%s on a closed client answered after %v: want at once", cmdString(c), el)
		}
	}
	t.Expect(o.Acquire(k, 1000, 0), "the key after a release on a closed client (nothing was sent)", "timeout")
	o.MustRelease(k, g.Token)
}

// scR8: bad arguments are refused `invalid` before anything is sent (the
// fake server sees no A or R), each message naming the argument and its
// limit; lone UTF-16 surrogates are refused, never replaced.
func scR8(t *T) {
	f := &fault.Fake{Token: fakeToken, Handler: newGranter(1).handle}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	acq := func(key any, lease, wait int64) map[string]any {
		return map[string]any{"cmd": "acquire", "key": key, "lease_ms": lease, "wait_ms": wait}
	}
	cases := []struct {
		name, arg string
		cmd       map[string]any
	}{
		{"empty key", "key", acq("", 1000, 0)},
		{"251-byte key", "key", acq(strings.Repeat("k", 251), 1000, 0)},
		{"invalid UTF-8 key", "key", map[string]any{"cmd": "acquire", "key_hex": "61ff62", "lease_ms": 1000, "wait_ms": 0}},
		{"lone high surrogate", "key", acq(json.RawMessage(`"a\ud800b"`), 1000, 0)},
		{"lone low surrogate", "key", acq(json.RawMessage(`"\udc00"`), 1000, 0)},
		{"control character", "key", acq("a\x01b", 1000, 0)},
		{"lease 0", "lease", acq("k", 0, 0)},
		{"negative lease", "lease", acq("k", -1, 0)},
		{"lease beyond u32 ms", "lease", acq("k", 1<<32, 0)},
		{"negative wait", "wait", acq("k", 1000, -1)},
		{"wait beyond u32 ms", "wait", acq("k", 1000, 1<<32)},
		{"release token 0", "token", map[string]any{"cmd": "release", "key": "k", "token": "0"}},
		{"release with an empty key", "key", map[string]any{"cmd": "release", "key": "", "token": "1"}},
	}
	for _, c := range cases {
		r := d.Call(c.cmd, 20*time.Second)
		t.Expect(r, c.name, "invalid")
		m := strings.ToLower(r.Message)
		if !strings.Contains(m, c.arg) || !strings.ContainsAny(m, "0123456789") {
			t.Fatalf("%s: the message must name the argument (%s) and its limit: %q", c.name, c.arg, r.Message)
		}
	}
	if a, rl := f.Count(wire.OpAcquire), f.Count(wire.OpRelease); a+rl != 0 {
		t.Fatalf("bad arguments reached the server (%d acquires, %d releases): refuse them before sending", a, rl)
	}
	g := d.MustAcquire("k", 1000, 0)
	d.MustRelease("k", g.Token)
}

// lockRow is key's row of the admin `locks` (nil when absent).
func (e *Env) lockRow(key string) (map[string]any, error) {
	var rep struct {
		Locks []map[string]any `json:"locks"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.admin.Admin(ctx, "locks", map[string]any{"prefix": key, "limit": 100}, &rep); err != nil {
		return nil, err
	}
	for _, l := range rep.Locks {
		if l["key"] == key {
			return l, nil
		}
	}
	return nil, nil
}

func waitHeld(t *T, key string, within time.Duration) map[string]any {
	var row map[string]any
	if !waitFor(within, func() bool {
		r, err := t.Env.lockRow(key)
		row = r
		return err == nil && r != nil
	}) {
		t.Fatalf("%q not held within %v (admin locks)", key, within)
	}
	return row
}

// scR10: a scope still open when the program exits (stdin EOF) ends and
// releases its lock: the key is free at once after the driver exited, not
// after its 60 s lease.
func scR10(t *T) {
	d, o := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	d.Send(map[string]any{"cmd": "with_lock", "key": k, "lease_ms": 60000, "wait_ms": 5000, "hold_ms": 60000, "fail": false})
	waitHeld(t, k, 15*time.Second)
	if err := d.Raw().Stop(8 * time.Second); err != nil {
		t.Fatalf("driver exit with a scope open: %v", err)
	}
	g := o.Acquire(k, 10000, 2000)
	if !g.OK {
		t.Fatalf("the key of a scope open at program exit is still held (the scope must release it at exit, R10): %s", g)
	}
	o.MustRelease(k, g.Token)
}

// scR11: cancelling a scoped form waiting in the queue withdraws it.
func scR11(t *T) {
	h, d := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := h.MustAcquire(k, 60000, 0)
	p := d.Send(map[string]any{"cmd": "with_lock", "key": k, "lease_ms": 30000, "wait_ms": 60000, "hold_ms": 100, "fail": false})
	waitDepth(t, k, 1, 15*time.Second, p)
	if c := d.Call(map[string]any{"cmd": "cancel", "target": p.ID}, 5*time.Second); !c.OK {
		t.Fatalf("cancel: %s", c)
	}
	t.Expect(t.Wait(p, 3*time.Second), "the cancelled with_lock", "cancelled")
	waitDepth(t, k, 0, 10*time.Second)
	h.MustRelease(k, g.Token)
	g2 := h.MustAcquire(k, 10000, 0)
	h.MustRelease(k, g2.Token)
}

// scR12: lease_ending with margin 500 ms on a 2 s lease fires ~1.5 s after
// the grant with ~500 ms remaining; on a released lease it answers at once
// (never an error).
func scR12(t *T) {
	d := t.Connected(t.Lang)
	k := t.Key("k")
	g := d.MustAcquire(k, 2000, 0)
	p := d.Send(map[string]any{"cmd": "lease_ending", "token": g.Token, "margin_ms": 500})
	r := t.Wait(p, 20*time.Second)
	var v struct {
		Remaining *int64 `json:"remaining_ms"`
	}
	json.Unmarshal(r.Raw, &v)
	if !r.OK || v.Remaining == nil {
		t.Fatalf("lease_ending: want {\"remaining_ms\": N}, got %s", r)
	}
	if el := r.At.Sub(g.At); el < 1100*time.Millisecond || el > 2200*time.Millisecond {
		t.Fatalf("lease_ending (margin 500 ms, lease 2 s) fired %v after the grant: want ~1.5 s", el)
	}
	if *v.Remaining < 100 || *v.Remaining > 700 {
		t.Fatalf("lease_ending fired with remaining_ms %d: want about the 500 ms margin", *v.Remaining)
	}
	k2 := t.Key("k2")
	g2 := d.MustAcquire(k2, 30000, 0)
	if r := d.Call(map[string]any{"cmd": "release_lease", "token": g2.Token}, 20*time.Second); !r.OK {
		t.Fatalf("release_lease: %s", r)
	}
	p = d.Send(map[string]any{"cmd": "lease_ending", "token": g2.Token, "margin_ms": 500})
	r = t.Wait(p, 10*time.Second)
	if !r.OK {
		t.Fatalf("lease_ending after release: want ok at once (it never throws after release), got %s", r)
	}
	if el := elapsed(p, r); el > 2*time.Second {
		t.Fatalf("lease_ending after release answered after %v: the lease ended at the release", el)
	}
}

// scR13: try_acquire on a held key returns "not acquired" as a value
// after its wait; on a free key the lease.
func scR13(t *T) {
	h, d := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := h.MustAcquire(k, 30000, 0)
	p := d.Send(map[string]any{"cmd": "try_acquire", "key": k, "lease_ms": 5000, "wait_ms": 300})
	r := t.Wait(p, 20*time.Second)
	if !r.OK || !strings.Contains(string(r.Raw), `"acquired":false`) {
		t.Fatalf("try_acquire on a held key: want ok {\"acquired\": false}, got %s", r)
	}
	if el := elapsed(p, r); el < 250*time.Millisecond {
		t.Fatalf("try_acquire (wait 300 ms) gave up after %v", el)
	}
	h.MustRelease(k, g.Token)
	r = d.Call(map[string]any{"cmd": "try_acquire", "key": k, "lease_ms": 5000, "wait_ms": 0}, 20*time.Second)
	if !r.OK || !strings.Contains(string(r.Raw), `"acquired":true`) || r.Token == "" {
		t.Fatalf("try_acquire on a free key: want {\"acquired\": true, \"token\": ...}, got %s", r)
	}
	d.MustRelease(k, r.Token)
}

// scR14: grants answered 1.2 s late: with min_remaining_ms 4500 of a 5 s
// lease the acquire fails insufficient_lease and the client releases the
// grant; with 2000 it is granted.
func scR14(t *T) {
	var tok atomic.Uint64
	tok.Store(900)
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		switch r.Op {
		case wire.OpAcquire:
			v := tok.Add(1)
			go func() {
				time.Sleep(1200 * time.Millisecond)
				c.Send(wire.AppendGranted(nil, r.ReqID, v, 0))
			}()
		case wire.OpRelease:
			c.Send(wire.AppendStatus(nil, wire.StatusReleased, 0, r.ReqID))
		}
	}
	d := t.Driver(t.Lang)
	d.MustConnect(startFake(t, f, 1), fakeToken, nil)
	c := AcquireCmd("k", 5000, 5000)
	c["min_remaining_ms"] = 4500
	r := d.Call(c, 30*time.Second)
	t.Expect(r, "a grant with 3.8 s of a 5 s lease left, min_remaining_ms 4500", "insufficient_lease")
	if !waitFor(6*time.Second, func() bool {
		for _, q := range f.Requests() {
			if q.Op == wire.OpRelease && q.Token() == 901 {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the insufficient grant (token 901) was not released by the client")
	}
	c = AcquireCmd("k2", 5000, 5000)
	c["min_remaining_ms"] = 2000
	g := d.Call(c, 30*time.Second)
	if !g.OK || g.Token != "902" {
		t.Fatalf("min_remaining_ms 2000 with 3.8 s left: want the grant (token 902), got %s", g)
	}
	d.MustRelease("k2", g.Token)
}

// scR15: errors name the key and the server address, and no code twice.
func scR15(t *T) {
	f := &fault.Fake{Token: fakeToken}
	f.Handler = func(c *fault.Conn, r fault.Req) {
		switch r.Op {
		case wire.OpAcquire:
			if r.Key == "where/busy" {
				c.Send(wire.AppendStatus(nil, wire.StatusBusy, wire.CodeQueueFull, r.ReqID))
			} else {
				c.Send(wire.AppendStatus(nil, wire.StatusTimeout, 0, r.ReqID))
			}
		case wire.OpRelease:
			c.Send(wire.AppendStatus(nil, wire.StatusNotHolder, 0, r.ReqID))
		}
	}
	addrs := startFake(t, f, 1)
	d := t.Driver(t.Lang)
	d.MustConnect(addrs, fakeToken, nil)
	port := addrs[0][strings.LastIndexByte(addrs[0], ':')+1:]
	for _, c := range []struct {
		kind, key string
		cmd       map[string]any
	}{
		{"busy", "where/busy", AcquireCmd("where/busy", 1000, 1000)},
		{"timeout", "where/held", AcquireCmd("where/held", 1000, 0)},
		{"not_holder", "where/free", map[string]any{"cmd": "release", "key": "where/free", "token": "77"}},
	} {
		r := d.Call(c.cmd, 20*time.Second)
		t.Expect(r, c.kind, c.kind)
		if !strings.Contains(r.Message, c.key) || !strings.Contains(r.Message, port) {
			t.Fatalf("%s: the message must name the key %q and the server %s: %q", c.kind, c.key, addrs[0], r.Message)
		}
		low := strings.ToLower(r.Message)
		for _, w := range []string{"queue_full", "queue full", "code 1)", "code 1 ", "(1)"} {
			if strings.Count(low, w) > 1 {
				t.Fatalf("%s: %q repeated in %q", c.kind, w, r.Message)
			}
		}
	}
}

// scR16: after a loss, the reconnect attempts of 8 connections (8 addresses,
// refused) are spread by jitter: for the steps 0.4, 0.8 and 1.6 s, the
// intervals of the 8 differ by at least a fifth of the step in at least two
// of the three (without jitter they coincide).
func scR16(t *T) {
	const n = 8
	f := &fault.Fake{Token: fakeToken, Handler: newGranter(1).handle, Accept: func(_, k int) bool { return k == 0 }}
	addrs := startFake(t, f, n)
	d := t.Driver(t.Lang)
	d.MustConnect(addrs, fakeToken, nil)
	if !waitFor(10*time.Second, func() bool {
		for i := range n {
			if f.Handshakes(i) != 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("want one connection to each of %d addresses", n)
	}
	loss := time.Now()
	f.CutAll()
	const attempts = 5 // steps 0.1 0.2 0.4 0.8 1.6
	if !waitFor(30*time.Second, func() bool {
		for i := range n {
			if len(f.Accepts(i)) <= attempts {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("fewer than %d reconnect attempts per address within 30 s", attempts)
	}
	iv := make([][]float64, n)
	for i := range n {
		acc := f.Accepts(i)[1:]
		prev := loss
		for a := range attempts {
			iv[i] = append(iv[i], acc[a].Sub(prev).Seconds())
			prev = acc[a]
		}
	}
	spread := 0
	var got []string
	for a, step := range []float64{0.1, 0.2, 0.4, 0.8, 1.6} {
		if a < 2 {
			continue
		}
		var col []float64
		for i := range n {
			col = append(col, iv[i][a])
		}
		sort.Float64s(col)
		r := col[n-1] - col[0]
		got = append(got, fmt.Sprintf("step %.1f s: intervals %.3f..%.3f", step, col[0], col[n-1]))
		if r >= step/5 {
			spread++
		}
	}
	if spread < 2 {
		t.Fatalf("reconnects of %d connections are not jittered (R16): %s", n, strings.Join(got, "; "))
	}
}

// scReleaseMoved: a release answered M (single mode's gap): the client
// follows the hint and gets O from the leader; the follower saw it once.
func scReleaseMoved(t *T) {
	f, addrs := movingFake(t, wire.OpRelease, 6000)
	d := t.Driver(t.Lang)
	d.MustConnect(addrs[:1], fakeToken, nil)
	gr := d.MustAcquire("k", 10000, 0)
	d.MustRelease("k", gr.Token)
	n0, n1 := 0, 0
	for _, q := range f.Requests() {
		if q.Op == wire.OpRelease {
			if q.Conn.Listener == 0 {
				n0++
			} else if q.Token() == 6001 {
				n1++
			}
		}
	}
	if n1 != 1 || n0 != 1 {
		t.Fatalf("releases: %d to the follower (want 1, answered M), %d with the token to the leader (want 1)", n0, n1)
	}
}

// Protocol 1.1 (protocol.md §12).

func setCmd(keys []string, leaseMS, waitMS int64) map[string]any {
	return map[string]any{"cmd": "acquire_set", "keys": keys, "lease_ms": leaseMS, "wait_ms": waitMS}
}

// scSetFIFO: a set and single-key waiters from every language share a key
// in FIFO order: a (held by a single-key holder) and b (free); the set
// {a, b} queues on both; then waiters on b from every language queue behind
// the set although b is free; the holder's release grants the set (one
// token above the holder's), and the set's release hands b to the waiters
// in order with increasing tokens.
func scSetFIFO(t *T) {
	a, b := t.Key("a"), t.Key("b")
	h := t.Connected(t.Lang)
	s := t.Connected(t.Lang)
	g := h.MustAcquire(a, 60000, 0)
	ps := s.Send(setCmd([]string{a, b}, 60000, 60000))
	waitDepth(t, a, 1, 15*time.Second, ps)
	waitDepth(t, b, 1, 15*time.Second, ps)
	var order []*D
	var pw []*Pending
	for _, l := range t.Langs {
		d := t.Connected(l)
		order = append(order, d)
		pw = append(pw, d.Send(AcquireCmd(b, 60000, 60000)))
		waitDepth(t, b, len(pw)+1, 15*time.Second, append([]*Pending{ps}, pw...)...)
	}
	for i, p := range pw {
		if p.Answered() {
			t.Fatalf("waiter %d on %q (free, but queued behind a set) answered: %s", i, b, p.res)
		}
	}
	h.MustRelease(a, g.Token)
	sr := t.Wait(ps, 20*time.Second)
	if !sr.OK {
		t.Fatalf("the set {a, b} after a's release: want a grant, got %s", sr)
	}
	prev := tokenOf(t, sr)
	if prev.Cmp(tokenOf(t, g)) <= 0 {
		t.Fatalf("set token %s not above the holder's %s", sr.Token, g.Token)
	}
	for i, p := range pw {
		if p.Answered() {
			t.Fatalf("waiter %d on %q answered while the set held it: %s", i, b, p.res)
		}
	}
	if r := s.Call(map[string]any{"cmd": "release_set", "keys": []string{b, a}, "token": sr.Token}, 20*time.Second); !r.OK {
		t.Fatalf("release_set: %s", r)
	}
	for i, p := range pw {
		r := t.Wait(p, 20*time.Second)
		if !r.OK {
			t.Fatalf("waiter %d (%s) on %q: want a grant, got %s", i, order[i].Lang, b, r)
		}
		for j := i + 1; j < len(pw); j++ {
			if pw[j].Answered() {
				t.Fatalf("waiter %d answered before waiter %d", j, i)
			}
		}
		tok := tokenOf(t, r)
		if tok.Cmp(prev) <= 0 {
			t.Fatalf("waiter %d token %s not above %s", i, tok, prev)
		}
		prev = tok
		order[i].MustRelease(b, r.Token)
	}
	// a is free again: the set released both keys.
	g2 := h.MustAcquire(a, 1000, 0)
	h.MustRelease(a, g2.Token)
}

// scSetExpiryCancel: a set's lease expires and hands its keys on (its
// stale release_set answers not_holder); a queued set is withdrawn from
// every queue by cancel.
func scSetExpiryCancel(t *T) {
	a, b := t.Key("a"), t.Key("b")
	d, o := t.Connected(t.Lang), t.Connected(t.Lang)
	sr := d.Call(setCmd([]string{a, b}, 700, 0), 20*time.Second)
	if !sr.OK {
		t.Fatalf("acquire_set: %s", sr)
	}
	w := o.Send(AcquireCmd(b, 10000, 15000))
	r := t.Wait(w, 25*time.Second)
	if !r.OK || tokenOf(t, r).Cmp(tokenOf(t, sr)) <= 0 {
		t.Fatalf("a waiter on b after the set's 700 ms lease: want a grant above %s, got %s", sr.Token, r)
	}
	t.Expect(d.Call(map[string]any{"cmd": "release_set", "keys": []string{a, b}, "token": sr.Token}, 20*time.Second),
		"release_set after the set's lease expired", "not_holder")
	// b is held by o: a set {a, b} queues on both, then is cancelled.
	p := d.Send(setCmd([]string{a, b}, 10000, 60000))
	waitDepth(t, b, 1, 15*time.Second, p)
	waitDepth(t, a, 1, 15*time.Second, p)
	if c := d.Call(map[string]any{"cmd": "cancel", "target": p.ID}, 5*time.Second); !c.OK {
		t.Fatalf("cancel: %s", c)
	}
	t.Expect(t.Wait(p, 5*time.Second), "the cancelled set", "cancelled")
	waitDepth(t, a, 0, 10*time.Second)
	waitDepth(t, b, 0, 10*time.Second)
	ga := o.MustAcquire(a, 1000, 0) // a was free with an empty queue again
	o.MustRelease(a, ga.Token)
	o.MustRelease(b, r.Token)
}

// scLabel: a connection label is shown as the holder's label in the admin
// `locks`, and a waiter's label among the waiters.
func scLabel(t *T) {
	k := t.Key("k")
	lh := fmt.Sprintf("tk-holder %s/%d", t.Lang.Name, keySeq.Add(1))
	lw := fmt.Sprintf("tk-waiter %s/%d", t.Lang.Name, keySeq.Add(1))
	h, w := t.Driver(t.Lang), t.Driver(t.Lang)
	for _, c := range []struct {
		d *D
		l string
	}{{h, lh}, {w, lw}} {
		if r := c.d.ConnectWith(t.Env.Addrs, t.Env.Token, t.Env.TLSSpec(), 0, map[string]any{"label": c.l}); !r.OK {
			t.Fatalf("connect with label %q: %s", c.l, r)
		}
	}
	g := h.MustAcquire(k, 30000, 0)
	p := w.Send(AcquireCmd(k, 10000, 30000))
	waitDepth(t, k, 1, 15*time.Second, p)
	row := waitHeld(t, k, 10*time.Second)
	b, _ := json.Marshal(row)
	var v struct {
		Holder  struct{ Label string }   `json:"holder"`
		Waiters []struct{ Label string } `json:"waiters"`
	}
	json.Unmarshal(b, &v)
	if v.Holder.Label != lh {
		t.Fatalf("admin locks: holder label %q, want %q (row %s)", v.Holder.Label, lh, b)
	}
	if len(v.Waiters) != 1 || v.Waiters[0].Label != lw {
		t.Fatalf("admin locks: waiters %+v, want one labelled %q (row %s)", v.Waiters, lw, b)
	}
	h.MustRelease(k, g.Token)
	r := t.Wait(p, 20*time.Second)
	if !r.OK {
		t.Fatalf("waiter: %s", r)
	}
	w.MustRelease(k, r.Token)
}
