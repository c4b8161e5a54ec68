package client

import (
	"crypto/rand"
	"encoding/json"

	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// fakeServer is a scripted Ticketing server for tests: it speaks the real
// handshake (client/wire) and hands every request to a handler, or, without
// one, to the test through next().
type fakeServer struct {
	t    testing.TB
	ln   net.Listener
	addr string
	opts fakeOpts

	reqs     chan fakeReq   // requests, when opts.handler is nil
	accepted chan *fakeConn // every connection past the handshake
	handler  func(fakeReq)  // optional; runs on the connection's reader goroutine
	hsCount  atomic.Int64   // handshakes attempted
	mu       sync.Mutex
	conns    map[*fakeConn]bool
	wg       sync.WaitGroup
	stopped  bool
}

type fakeOpts struct {
	flags       byte   // HELLO flags (wire.HelloFlagTokens)
	clientToken string // the key the server proves with for role client
	adminToken  string // for role admin; defaults to clientToken
	maxInflight uint32 // WELCOME max_inflight; default 1024
	reject      wire.Code
	badProof    bool // sign the WELCOME with a wrong key (an impostor)
	addr        string
	handler     func(fakeReq)
	features    wire.Features // announced in the feature pong; 0 (a 1.0 server) by default
}

type fakeReq struct {
	fc *fakeConn
	wire.Request
	key string
}

type fakeConn struct {
	s    *fakeServer
	nc   net.Conn
	role wire.Role
	wmu  sync.Mutex
}

func newFake(t testing.TB, o fakeOpts) *fakeServer {
	t.Helper()
	addr := o.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var err error
	// A restart may find the port briefly in use.
	eventually(t, "the fake to listen on "+addr, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	if o.maxInflight == 0 {
		o.maxInflight = 1024
	}
	if o.adminToken == "" {
		o.adminToken = o.clientToken
	}
	s := &fakeServer{
		t:        t,
		ln:       ln,
		addr:     ln.Addr().String(),
		opts:     o,
		reqs:     make(chan fakeReq, 100000),
		accepted: make(chan *fakeConn, 1000),
		handler:  o.handler,
		conns:    map[*fakeConn]bool{},
	}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.stop)
	return s
}

func (s *fakeServer) acceptLoop() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		fc := &fakeConn{s: s, nc: nc}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[fc] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go fc.serve()
	}
}

// stop closes the listener and every connection and waits for the goroutines.
func (s *fakeServer) stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.ln.Close()
	for fc := range s.conns {
		fc.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// dropConns closes every connection but keeps listening.
func (s *fakeServer) dropConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for fc := range s.conns {
		fc.nc.Close()
	}
}

func (fc *fakeConn) serve() {
	s := fc.s
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, fc)
		s.mu.Unlock()
		fc.nc.Close()
	}()
	if !fc.handshake() {
		return
	}
	s.accepted <- fc
	buf := make([]byte, 0, 64<<10)
	tmp := make([]byte, 64<<10)
	for {
		n, err := fc.nc.Read(tmp)
		buf = append(buf, tmp[:n]...)
		for {
			r, m, perr := wire.ParseRequest(buf)
			if perr != nil {
				return
			}
			if m == 0 {
				break
			}
			req := fakeReq{fc: fc, Request: r, key: string(r.Key)}
			req.Body = append([]byte(nil), r.Body...)
			req.Key = nil
			buf = buf[m:]
			if r.Op == wire.OpPing && r.Arg == wire.PingArgFeatures {
				// the client's feature ping after the handshake (protocol.md
				// §12.1): the fake is a 1.0 server, a plain pong (features 0)
				fc.send(wire.AppendPongFeatures(nil, r.ReqID, s.opts.features, uint64(time.Now().UnixMicro())))
				continue
			}
			if s.handler != nil {
				s.handler(req)
			} else {
				s.reqs <- req
			}
		}
		buf = append(buf[:0:0], buf...)
		if err != nil {
			return
		}
	}
}

func (fc *fakeConn) handshake() bool {
	s := fc.s
	s.hsCount.Add(1)
	h := wire.Hello{Flags: s.opts.flags}
	rand.Read(h.Nonce[:])
	if _, err := fc.nc.Write(wire.AppendHello(nil, &h)); err != nil {
		return false
	}
	var b [wire.AuthLen]byte
	fc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(fc.nc, b[:]); err != nil {
		return false
	}
	fc.nc.SetReadDeadline(time.Time{})
	a, err := wire.ParseAuth(b[:])
	if err != nil {
		fc.nc.Write(wire.AppendReject(nil, wire.CodeBadHandshake))
		return false
	}
	fc.role = a.Role
	if s.opts.reject != 0 {
		fc.nc.Write(wire.AppendReject(nil, s.opts.reject))
		return false
	}
	token := s.opts.clientToken
	if a.Role == wire.RoleAdmin {
		token = s.opts.adminToken
	}
	if s.opts.flags&wire.HelloFlagTokens != 0 {
		want := wire.ClientProof([]byte(token), a.Role, &h.Nonce, &a.Nonce)
		if !wire.ProofEqual(&want, &a.Proof) {
			fc.nc.Write(wire.AppendReject(nil, wire.CodeAuthFailed))
			return false
		}
	}
	signKey := token
	if s.opts.badProof {
		signKey = "not-the-token"
	}
	w := wire.Welcome{Status: wire.WelcomeAccepted, MaxInflight: s.opts.maxInflight,
		Proof: wire.ServerProof([]byte(signKey), a.Role, &a.Nonce, &h.Nonce)}
	_, err = fc.nc.Write(wire.AppendWelcome(nil, &w))
	return err == nil
}

// send writes raw response bytes on this connection.
func (fc *fakeConn) send(b []byte) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.nc.Write(b)
}

func (fc *fakeConn) close() { fc.nc.Close() }

// Responses.
func (r fakeReq) grant(token uint64, queued uint16) {
	r.fc.send(wire.AppendGranted(nil, r.ReqID, token, queued))
}
func (r fakeReq) status(st wire.Status, code wire.Code) {
	r.fc.send(wire.AppendStatus(nil, st, code, r.ReqID))
}
func (r fakeReq) moved(leader string) { r.fc.send(wire.AppendMoved(nil, r.ReqID, leader)) }
func (r fakeReq) errorResp(code wire.Code, msg string) {
	r.fc.send(wire.AppendError(nil, r.ReqID, code, msg))
}
func (r fakeReq) admin(v any) {
	b, _ := json.Marshal(v)
	r.fc.send(wire.AppendAdmin(nil, r.ReqID, b))
}
func (r fakeReq) pong(us uint64) { r.fc.send(wire.AppendPong(nil, r.ReqID, us)) }

// next returns the next request (when no handler is set).
func (s *fakeServer) next(t testing.TB) fakeReq {
	t.Helper()
	select {
	case r := <-s.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("fake %s: no request within 10s", s.addr)
	}
	return fakeReq{}
}

// nextOp returns the next request and checks its op.
func (s *fakeServer) nextOp(t testing.TB, op wire.Op) fakeReq {
	t.Helper()
	r := s.next(t)
	if r.Op != op {
		t.Fatalf("fake %s: got op %q, want %q", s.addr, rune(r.Op), rune(op))
	}
	return r
}

// quiet asserts that no request arrives within d.
func (s *fakeServer) quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case r := <-s.reqs:
		t.Fatalf("fake %s: unexpected request %q req_id %d key %q", s.addr, rune(r.Op), r.ReqID, r.key)
	case <-time.After(d):
	}
}

// waitConns waits until n connections finished the handshake.
func (s *fakeServer) waitConns(t testing.TB, n int) []*fakeConn {
	t.Helper()
	var out []*fakeConn
	for len(out) < n {
		select {
		case fc := <-s.accepted:
			out = append(out, fc)
		case <-time.After(10 * time.Second):
			t.Fatalf("fake %s: %d of %d connections", s.addr, len(out), n)
		}
	}
	return out
}

// fakeLocks is a small in-memory lock table for handler-driven fakes:
// grants, FIFO queues with handoff, release, cancel, ping and admin.
type fakeLocks struct {
	mu     sync.Mutex
	next   uint64
	keys   map[string]*fakeKey
	counts map[wire.Op]int
}

type fakeKey struct {
	token   uint64
	waiters []fakeReq
}

func newFakeLocks() *fakeLocks {
	return &fakeLocks{next: 1000, keys: map[string]*fakeKey{}, counts: map[wire.Op]int{}}
}

func (l *fakeLocks) count(op wire.Op) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[op]
}

func (l *fakeLocks) handle(r fakeReq) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[r.Op]++
	k := l.keys[r.key]
	switch r.Op {
	case wire.OpAcquire:
		if k == nil || k.token == 0 {
			if k == nil {
				k = &fakeKey{}
				l.keys[r.key] = k
			}
			l.next++
			k.token = l.next
			r.grant(k.token, 0)
		} else if r.WaitMS() == 0 {
			r.status(wire.StatusTimeout, 0)
		} else {
			k.waiters = append(k.waiters, r)
		}
	case wire.OpRelease:
		if k == nil || k.token != r.Token() {
			r.status(wire.StatusNotHolder, 0)
			return
		}
		r.status(wire.StatusReleased, 0)
		k.token = 0
		if len(k.waiters) > 0 {
			w := k.waiters[0]
			k.waiters = k.waiters[1:]
			l.next++
			k.token = l.next
			w.grant(k.token, 1)
		}
	case wire.OpCancel:
		if k != nil {
			for i, w := range k.waiters {
				if w.fc == r.fc && w.ReqID == r.Target() {
					k.waiters = append(k.waiters[:i], k.waiters[i+1:]...)
					w.status(wire.StatusTimeout, 0)
					r.status(wire.StatusReleased, 0)
					return
				}
			}
		}
		r.status(wire.StatusNotHolder, 0)
	case wire.OpPing:
		r.pong(uint64(time.Now().UnixMicro()))
	case wire.OpQuery:
		r.admin(map[string]any{"ok": true})
	}
}
