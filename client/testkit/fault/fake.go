package fault

import (
	"crypto/rand"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Fake is a scripted Ticketing server: it speaks the real handshake
// (client/wire) and hands each request to Handler, recording connection
// attempts and requests with their times. Several listeners may share one
// script (AddListener), each recording its own accept times.
type Fake struct {
	// Token is the client token the fake checks and proves with ("" = none).
	Token string
	// Flags overrides the HELLO flags (default: HelloFlagTokens when Token is set).
	Flags *byte
	// ProofKey, when non-nil, signs the WELCOME with this key instead of
	// Token: an impostor that does not know the token.
	ProofKey []byte
	// AcceptAny accepts any client proof (an impostor cannot check it).
	AcceptAny bool
	// Reject answers every AUTH with this REJECT code (0 = accept).
	Reject wire.Code
	// Accept decides per connection attempt (n counts from 0 per listener):
	// false closes the TCP connection at once, before HELLO. Nil accepts all.
	Accept func(listener, n int) bool
	// Hello, when set, replaces the HELLO bytes (garbage handshakes).
	Hello []byte
	// MaxInflight of the WELCOME (default 1024).
	MaxInflight uint32
	// Handler answers a request; nil drops it. It runs on the connection's
	// reader goroutine.
	Handler func(c *Conn, r Req)
	// Features are the protocol 1.1 feature bits of the fake's answer to a
	// client's feature ping (a P with arg 1, protocol.md §12.1), which the
	// fake answers itself, without recording it or calling Handler: 0 (the
	// default) is a 1.0 server, so a 1.1 client uses no 1.1 frame with it.
	Features wire.Features

	reject atomic.Uint32 // SetReject

	mu     sync.Mutex
	lns    []net.Listener
	accs   [][]time.Time
	reqs   []Req
	conns  map[*Conn]bool
	hs     []int // handshakes completed, per listener
	closed bool
	wg     sync.WaitGroup
}

// Req is a recorded request.
type Req struct {
	wire.Request
	Key  string
	Raw  []byte
	Time time.Time
	Conn *Conn
}

// Conn is one accepted, handshaken connection.
type Conn struct {
	f        *Fake
	nc       net.Conn
	Listener int
	wmu      sync.Mutex
}

// AddListener opens one more listen address on 127.0.0.1:0 and returns it.
func (f *Fake) AddListener() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	if f.conns == nil {
		f.conns = map[*Conn]bool{}
	}
	i := len(f.lns)
	f.lns = append(f.lns, ln)
	f.accs = append(f.accs, nil)
	f.hs = append(f.hs, 0)
	f.mu.Unlock()
	f.wg.Add(1)
	go f.acceptLoop(i, ln)
	return ln.Addr().String(), nil
}

// Accepts returns the times of the connection attempts on listener i.
func (f *Fake) Accepts(i int) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.accs[i]...)
}

// Handshakes is the number of handshakes completed (WELCOME sent) on listener i.
func (f *Fake) Handshakes(i int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hs[i]
}

// Requests returns the recorded requests.
func (f *Fake) Requests() []Req {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Req(nil), f.reqs...)
}

// Count counts the recorded requests of op.
func (f *Fake) Count(op wire.Op) int {
	n := 0
	for _, r := range f.Requests() {
		if r.Op == op {
			n++
		}
	}
	return n
}

// CutAll closes every open connection.
func (f *Fake) CutAll() {
	f.mu.Lock()
	var cs []*Conn
	for c := range f.conns {
		cs = append(cs, c)
	}
	f.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// Close stops every listener and connection and waits for their goroutines.
func (f *Fake) Close() {
	f.mu.Lock()
	f.closed = true
	lns := f.lns
	f.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	f.CutAll()
	f.wg.Wait()
}

func (f *Fake) acceptLoop(i int, ln net.Listener) {
	defer f.wg.Done()
	for n := 0; ; n++ {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.accs[i] = append(f.accs[i], time.Now())
		closed := f.closed
		f.mu.Unlock()
		if closed || (f.Accept != nil && !f.Accept(i, n)) {
			nc.Close()
			continue
		}
		c := &Conn{f: f, nc: nc, Listener: i}
		f.mu.Lock()
		f.conns[c] = true
		f.wg.Add(1)
		f.mu.Unlock()
		go c.serve()
	}
}

// SetReject makes every later AUTH answered with REJECT code (0: back to
// Reject), e.g. a token rotated on the server while clients are connected.
func (f *Fake) SetReject(code wire.Code) { f.reject.Store(uint32(code)) }

func (f *Fake) rejectCode() wire.Code {
	if c := f.reject.Load(); c != 0 {
		return wire.Code(c)
	}
	return f.Reject
}

// Send writes b to the connection.
func (c *Conn) Send(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// Close closes the connection.
func (c *Conn) Close() {
	c.nc.Close()
}

func (c *Conn) serve() {
	f := c.f
	defer f.wg.Done()
	defer func() {
		c.nc.Close()
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
	}()
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if f.Hello != nil {
		c.Send(f.Hello)
		buf := make([]byte, 4096)
		for {
			if _, err := c.nc.Read(buf); err != nil {
				return
			}
		}
	}
	h := wire.Hello{}
	if f.Token != "" {
		h.Flags = wire.HelloFlagTokens
	}
	if f.Flags != nil {
		h.Flags = *f.Flags
	}
	rand.Read(h.Nonce[:])
	if c.Send(wire.AppendHello(nil, &h)) != nil {
		return
	}
	b := make([]byte, wire.AuthLen)
	if _, err := readFull(c.nc, b); err != nil {
		return
	}
	a, err := wire.ParseAuth(b)
	if err != nil {
		c.Send(wire.AppendReject(nil, wire.CodeBadHandshake))
		return
	}
	if code := f.rejectCode(); code != 0 {
		c.Send(wire.AppendReject(nil, code))
		return
	}
	tok := []byte(f.Token)
	want := wire.ClientProof(tok, a.Role, &h.Nonce, &a.Nonce)
	if !f.AcceptAny && !wire.ProofEqual(&want, &a.Proof) {
		c.Send(wire.AppendReject(nil, wire.CodeAuthFailed))
		return
	}
	key := tok
	if f.ProofKey != nil {
		key = f.ProofKey
	}
	mi := f.MaxInflight
	if mi == 0 {
		mi = 1024
	}
	w := wire.Welcome{Status: wire.WelcomeAccepted, MaxInflight: mi, Proof: wire.ServerProof(key, a.Role, &a.Nonce, &h.Nonce)}
	if c.Send(wire.AppendWelcome(nil, &w)) != nil {
		return
	}
	f.mu.Lock()
	f.hs[c.Listener]++
	f.mu.Unlock()
	c.nc.SetDeadline(time.Time{})
	var pend []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := c.nc.Read(buf)
		pend = append(pend, buf[:n]...)
		for {
			req, k, perr := wire.ParseRequest(pend)
			if perr != nil {
				return
			}
			if k == 0 {
				break
			}
			if req.Op == wire.OpPing && req.Arg == wire.PingArgFeatures {
				_ = c.Send(wire.AppendPongFeatures(nil, req.ReqID, f.Features, uint64(time.Now().UnixMicro())))
				pend = pend[k:]
				continue
			}
			raw := append([]byte(nil), pend[:k]...)
			req, _, _ = wire.ParseRequest(raw)
			r := Req{Request: req, Key: string(req.Key), Raw: raw, Time: time.Now(), Conn: c}
			pend = pend[k:]
			f.mu.Lock()
			f.reqs = append(f.reqs, r)
			f.mu.Unlock()
			if f.Handler != nil {
				f.Handler(c, r)
			}
		}
		if err != nil {
			return
		}
	}
}

func readFull(nc net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := nc.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
