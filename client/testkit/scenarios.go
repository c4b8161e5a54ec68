package testkit

import (
	"fmt"
	"math/big"
	"strings"
	"time"
)

// Scenarios is the list every language runs (docs/clients.md describes each).
// Those against a real server run in every mode; those against a scripted
// fake server or a fault proxy run in "single" only (fakes.go).
func Scenarios() []Scenario {
	s := []Scenario{
		{Name: "info", Modes: []string{"single"}, Run: scInfo},
		{Name: "handshake_token", Run: scHandshakeToken},
		{Name: "wait0_try_once", Run: scWait0},
		{Name: "fifo_cross_language", Run: scFIFO},
		{Name: "release_by_other_language", Run: scCrossRelease},
		{Name: "lease_expiry_handoff", Run: scLeaseExpiry},
		{Name: "cancel_queued", Run: scCancelQueued},
		{Name: "deadline_after_queue", Run: scDeadlineQueued},
		{Name: "inflight_100", Run: scInflight100},
		{Name: "with_lock_normal", Run: scWithLock(false)},
		{Name: "with_lock_fail", Run: scWithLock(true)},
		{Name: "close_pending", Run: scClosePending},
		{Name: "bad_input", Run: scBadInput},
		{Name: "tls_verify", Modes: []string{"tls"}, Run: scTLS},
	}
	s = append(s, faultScenarios()...)
	return append(s, edgeScenarios()...)
}

// ScenarioNames lists the names in order.
func ScenarioNames() []string {
	var n []string
	for _, s := range Scenarios() {
		n = append(n, s.Name)
	}
	return n
}

func tokenOf(t *T, r Result) *big.Int {
	v, ok := new(big.Int).SetString(r.Token, 10)
	if !ok || v.Sign() <= 0 {
		t.Fatalf("token %q is not a positive decimal string: %s", r.Token, r)
	}
	return v
}

func scInfo(t *T) {
	d := t.Driver(t.Lang)
	r := d.Call(map[string]any{"cmd": "info"}, 30*time.Second)
	if !r.OK {
		t.Fatalf("info: %s", r)
	}
	want := t.Lang.Name
	if r.Language != want {
		t.Fatalf("info: language %q, want %q: %s", r.Language, want, r)
	}
	if !strings.Contains(string(r.Raw), `"client_version"`) || !strings.Contains(string(r.Raw), `"runtime"`) {
		t.Fatalf("info: client_version or runtime missing: %s", r)
	}
}

func scHandshakeToken(t *T) {
	bad := t.Driver(t.Lang)
	r := bad.Connect(t.Env.Addrs, "wrong-"+t.Env.Token[:4], t.Env.TLSSpec(), 5000)
	t.Expect(r, "connect with a wrong token", "auth")
	none := t.Driver(t.Lang)
	r = none.Connect(t.Env.Addrs, nil, t.Env.TLSSpec(), 5000)
	t.Expect(r, "connect without a token", "auth")
	d := t.Connected(t.Lang)
	k := t.Key("k")
	g := d.MustAcquire(k, 10000, 0)
	d.MustRelease(k, g.Token)
}

func scWait0(t *T) {
	h, d := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := h.MustAcquire(k, 30000, 0)
	p := d.Send(AcquireCmd(k, 10000, 0))
	r, err := p.Wait(5 * time.Second)
	t.Check(err)
	t.Expect(r, "wait 0 on a held key", "timeout")
	if el := r.At.Sub(p.Sent); el > 3*time.Second {
		t.Fatalf("wait 0 took %v: it must try once and answer at once", el)
	}
	h.MustRelease(k, g.Token)
	g2 := d.MustAcquire(k, 10000, 0)
	d.MustRelease(k, g2.Token)
}

// waitDepth waits until key has depth acquires queued; a watched command
// answering meanwhile fails the scenario at once (with its answer).
func waitDepth(t *T, key string, depth int, within time.Duration, watch ...*Pending) {
	end := time.Now().Add(within)
	last := -1
	for time.Now().Before(end) {
		for _, p := range watch {
			if p.Answered() {
				t.NoUnsupported(p, *p.res)
				t.Fatalf("%s answered while waiting for queue depth %d of %q: %s", cmdString(p.Cmd), depth, key, p.res)
			}
		}
		n, err := t.Env.QueueDepth(key)
		if err == nil {
			last = n
			if n == depth {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("queue depth of %q: want %d within %v, last seen %d", key, depth, within, last)
}

// scFIFO: a holder in the language under test, then waiters from every
// language, queued one by one in a fixed order (each is queued on the server
// before the next is sent); each release hands the key to the next waiter in
// order, with a strictly larger token.
func scFIFO(t *T) {
	k := t.Key("k")
	h := t.Connected(t.Lang)
	g := h.MustAcquire(k, 60000, 0)
	var order []*D
	drivers := map[string]*D{}
	rounds := 2
	if len(t.Langs) == 1 {
		rounds = 3
	}
	for range rounds {
		for _, l := range t.Langs {
			if drivers[l.Name] == nil {
				drivers[l.Name] = t.Connected(l)
			}
			order = append(order, drivers[l.Name])
		}
	}
	var ps []*Pending
	for i, d := range order {
		ps = append(ps, d.Send(AcquireCmd(k, 60000, 60000)))
		waitDepth(t, k, i+1, 15*time.Second)
	}
	prev := tokenOf(t, g)
	relDriver, relToken := h, g.Token
	for i, p := range ps {
		relDriver.MustRelease(k, relToken)
		r, err := p.Wait(20 * time.Second)
		t.Check(err)
		if !r.OK {
			t.Fatalf("waiter %d (%s): want a grant, got %s", i, order[i].Lang, r)
		}
		for j := i + 1; j < len(ps); j++ {
			if ps[j].Answered() {
				t.Fatalf("waiter %d (%s) answered before waiter %d: %s", j, order[j].Lang, i+1, ps[j].res)
			}
		}
		tok := tokenOf(t, r)
		if tok.Cmp(prev) <= 0 {
			t.Fatalf("waiter %d (%s): token %s not above the previous %s", i, order[i].Lang, tok, prev)
		}
		prev, relDriver, relToken = tok, order[i], r.Token
	}
	relDriver.MustRelease(k, relToken)
}

// scCrossRelease: a token issued to the language under test is released by
// every language (itself included).
func scCrossRelease(t *T) {
	a := t.Connected(t.Lang)
	for _, l := range t.Langs {
		k := t.Key(l.Name)
		g := a.MustAcquire(k, 30000, 0)
		b := t.Connected(l)
		b.MustRelease(k, g.Token)
		// Free again: a try succeeds.
		g2 := a.MustAcquire(k, 30000, 0)
		if tokenOf(t, g2).Cmp(tokenOf(t, g)) <= 0 {
			t.Fatalf("token after release %s not above %s", g2.Token, g.Token)
		}
		r := b.Release(k, g.Token)
		t.Expect(r, "release of a stale token", "not_holder")
		a.MustRelease(k, g2.Token)
	}
}

func scLeaseExpiry(t *T) {
	a, b := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := a.MustAcquire(k, 700, 0)
	p := b.Send(AcquireCmd(k, 10000, 15000))
	r, err := p.Wait(25 * time.Second)
	t.Check(err)
	if !r.OK {
		t.Fatalf("waiter after a 700 ms lease: want a grant, got %s", r)
	}
	el := r.At.Sub(g.At)
	if el < 350*time.Millisecond || el > 6*time.Second {
		t.Fatalf("handoff %v after the grant of a 700 ms lease: want 0.35..6 s", el)
	}
	if tokenOf(t, r).Cmp(tokenOf(t, g)) <= 0 {
		t.Fatalf("token %s not above the expired holder's %s", r.Token, g.Token)
	}
	r2 := a.Release(k, g.Token)
	t.Expect(r2, "release after the lease expired", "not_holder")
	b.MustRelease(k, r.Token)
}

func scCancelQueued(t *T) {
	h, d := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := h.MustAcquire(k, 60000, 0)
	p := d.Send(AcquireCmd(k, 30000, 60000))
	waitDepth(t, k, 1, 15*time.Second)
	c := d.Call(map[string]any{"cmd": "cancel", "target": p.ID}, 5*time.Second)
	if !c.OK {
		t.Fatalf("cancel: want {}, got %s", c)
	}
	r, err := p.Wait(5 * time.Second)
	t.Check(err)
	t.Expect(r, "the cancelled acquire", "cancelled")
	waitDepth(t, k, 0, 10*time.Second)
	h.MustRelease(k, g.Token)
	g2 := h.MustAcquire(k, 10000, 0) // nobody took it: the waiter was withdrawn
	h.MustRelease(k, g2.Token)
}

// scDeadlineQueued: after a queue wait the local deadline counts from the
// send time plus G's queued time, i.e. about a full lease from the grant.
func scDeadlineQueued(t *T) {
	h, d := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := h.MustAcquire(k, 60000, 0)
	const lease = 5000
	p := d.Send(AcquireCmd(k, lease, 30000))
	waitDepth(t, k, 1, 15*time.Second)
	time.Sleep(2500 * time.Millisecond)
	h.MustRelease(k, g.Token)
	r, err := p.Wait(20 * time.Second)
	t.Check(err)
	if !r.OK || r.DeadlineInMS == nil {
		t.Fatalf("want a grant with deadline_in_ms, got %s", r)
	}
	if dl := *r.DeadlineInMS; dl < lease-1200 || dl > lease+50 {
		t.Fatalf("deadline_in_ms %d after a ~2.5 s queue wait with lease %d: want %d..%d (send time + queued + lease)", dl, lease, lease-1200, lease+50)
	}
	d.MustRelease(k, r.Token)
}

func scInflight100(t *T) {
	h, d := t.Connected(t.Lang), t.Connected(t.Lang)
	base := t.Key("k")
	var toks []string
	var holds []*Pending
	for i := range 100 {
		holds = append(holds, h.Send(AcquireCmd(fmt.Sprintf("%s/%d", base, i), 60000, 0)))
	}
	for i, p := range holds {
		r, err := p.Wait(30 * time.Second)
		t.Check(err)
		if !r.OK {
			t.Fatalf("holder acquire %d: %s", i, r)
		}
		toks = append(toks, r.Token)
	}
	var ps []*Pending
	for i := range 100 {
		ps = append(ps, d.Send(AcquireCmd(fmt.Sprintf("%s/%d", base, i), 30000, 60000)))
	}
	// All 100 are queued on the server at once, through the one client.
	end := time.Now().Add(10 * time.Second)
	for {
		n, err := t.Env.QueuedUnder(base + "/")
		if err == nil && n == 100 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("only %d of 100 acquires queued at once through one client (%v)", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, p := range ps {
		if p.Answered() {
			t.Fatalf("acquire %d answered while its key was held: %s", i, p.res)
		}
	}
	var rels []*Pending
	for i := range 100 {
		rels = append(rels, h.Send(map[string]any{"cmd": "release", "key": fmt.Sprintf("%s/%d", base, i), "token": toks[i]}))
	}
	seen := map[string]bool{}
	for i, p := range ps {
		r, err := p.Wait(30 * time.Second)
		t.Check(err)
		if !r.OK || seen[r.Token] {
			t.Fatalf("acquire %d: want a grant with a fresh token, got %s", i, r)
		}
		seen[r.Token] = true
		d.Send(map[string]any{"cmd": "release", "key": fmt.Sprintf("%s/%d", base, i), "token": r.Token})
	}
	for _, p := range rels {
		r, err := p.Wait(30 * time.Second)
		t.Check(err)
		if !r.OK {
			t.Fatalf("holder release: %s", r)
		}
	}
}

func scWithLock(fail bool) func(t *T) {
	return func(t *T) {
		d, o := t.Connected(t.Lang), t.Connected(t.Lang)
		k := t.Key("k")
		p := d.Send(map[string]any{"cmd": "with_lock", "key": k, "lease_ms": 30000, "wait_ms": 5000, "hold_ms": 300, "fail": fail})
		// Held inside the scope.
		time.Sleep(100 * time.Millisecond)
		r, err := p.Wait(30 * time.Second)
		t.Check(err)
		if !r.OK || r.Token == "" {
			t.Fatalf("with_lock fail=%v: want ok with the token (the error swallowed after the scope), got %s", fail, r)
		}
		if el := r.At.Sub(p.Sent); el < 250*time.Millisecond {
			t.Fatalf("with_lock answered after %v, before its hold_ms 300", el)
		}
		// The scope released it: a try from another client succeeds at once.
		g := o.Acquire(k, 10000, 0)
		if !g.OK {
			t.Fatalf("after with_lock fail=%v the key is not free: %s", fail, g)
		}
		if tokenOf(t, g).Cmp(tokenOf(t, r)) <= 0 {
			t.Fatalf("token %s not above with_lock's %s", g.Token, r.Token)
		}
		o.MustRelease(k, g.Token)
	}
}

func scClosePending(t *T) {
	h, d := t.Connected(t.Lang), t.Connected(t.Lang)
	k := t.Key("k")
	g := h.MustAcquire(k, 60000, 0)
	p := d.Send(AcquireCmd(k, 30000, 60000))
	waitDepth(t, k, 1, 15*time.Second)
	c := d.Call(map[string]any{"cmd": "close"}, 15*time.Second)
	if !c.OK {
		t.Fatalf("close: want {}, got %s", c)
	}
	r, err := p.Wait(5 * time.Second)
	t.Check(err)
	t.Expect(r, "an acquire pending at close", "closed", "indeterminate")
	r2 := d.Acquire(t.Key("after"), 1000, 0)
	t.Expect(r2, "an acquire after close", "closed")
	h.MustRelease(k, g.Token)
}

func scBadInput(t *T) {
	d := t.Connected(t.Lang)
	k := t.Key("k")
	cases := []struct {
		name string
		cmd  map[string]any
	}{
		{"empty key", AcquireCmd("", 1000, 0)},
		{"251-byte key", AcquireCmd(strings.Repeat("k", 251), 1000, 0)},
		{"control character in key", AcquireCmd("a\x01b", 1000, 0)},
		{"newline in key", AcquireCmd("a\nb", 1000, 0)},
		{"invalid UTF-8 key", map[string]any{"cmd": "acquire", "key_hex": "61ff62", "lease_ms": 1000, "wait_ms": 0}},
		{"lease 0", AcquireCmd(k, 0, 0)},
		{"lease above max (1 h + 1 ms)", AcquireCmd(k, 3600001, 0)},
		{"wait above max (15 min + 1 ms)", AcquireCmd(k, 1000, 900001)},
		{"release with an empty key", map[string]any{"cmd": "release", "key": "", "token": "1"}},
	}
	for _, c := range cases {
		r := d.Call(c.cmd, 20*time.Second)
		t.Expect(r, c.name, "invalid")
	}
	// The connection is intact: a valid acquire works at once.
	g := d.MustAcquire(k, 10000, 0)
	d.MustRelease(k, g.Token)
}

func scTLS(t *T) {
	f := t.Env.TLS
	spec := func(ca, cert, key string) map[string]any {
		return map[string]any{"ca": ca, "cert": cert, "key": key, "server_name": f.ServerName}
	}
	// Wrong CA: the server certificate does not verify.
	d := t.Driver(t.Lang)
	r := d.Connect(t.Env.Addrs, t.Env.Token, spec(f.OtherCA, f.ClientCert, f.ClientKey), 5000)
	t.Expect(r, "TLS with an unrelated CA", "tls")
	// Wrong server name.
	d = t.Driver(t.Lang)
	r = d.Connect(t.Env.Addrs, t.Env.Token, map[string]any{"ca": f.CA, "cert": f.ClientCert, "key": f.ClientKey, "server_name": "not-the-server.invalid"}, 5000)
	t.Expect(r, "TLS with a wrong server name", "tls")
	// Mutual TLS: no client certificate is refused.
	d = t.Driver(t.Lang)
	r = d.Connect(t.Env.Addrs, t.Env.Token, map[string]any{"ca": f.CA, "cert": nil, "key": nil, "server_name": f.ServerName}, 5000)
	t.Expect(r, "mutual TLS without a client certificate", "tls", "connect", "auth")
	// Plain TCP to a TLS port fails.
	d = t.Driver(t.Lang)
	r = d.Connect(t.Env.Addrs, t.Env.Token, nil, 3000)
	t.Expect(r, "plain TCP to a TLS server", "connect", "protocol", "tls")
	// With the client certificate: works.
	d = t.Driver(t.Lang)
	d.MustConnect(t.Env.Addrs, t.Env.Token, t.Env.TLSSpec())
	k := t.Key("k")
	g := d.MustAcquire(k, 10000, 0)
	d.MustRelease(k, g.Token)
	// TLS without client certificates (a second server): CA only.
	s, err := StartServer(t.Env.Bin, "--listen", "127.0.0.1:0", "--log-level", "info", "--token", t.Env.Token,
		"--tls-cert", f.ServerCert, "--tls-key", f.ServerKey)
	t.Check(err)
	t.Cleanup(s.Stop)
	d = t.Driver(t.Lang)
	d.MustConnect([]string{s.Addr}, t.Env.Token, map[string]any{"ca": f.CA, "cert": nil, "key": nil, "server_name": f.ServerName})
	g = d.MustAcquire(k, 10000, 0)
	d.MustRelease(k, g.Token)
}
