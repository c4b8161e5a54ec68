package server

import (
	"container/list"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ticketing/ticketing/client/wire"
	"github.com/ticketing/ticketing/server/locktable"
)

const (
	smallReadBuf = 2 << 10  // a new connection's read buffer (most stay idle or light)
	readBufSize  = 16 << 10 // read buffer once a read filled the small one; grows for one large Q frame, then shrinks
	keepBufLimit = 64 << 10 // buffers grown past this by an admin reply are dropped after use
)

// conn is one client connection after accept.
type conn struct {
	s           *Server
	nc          net.Conn
	raw         net.Conn // as accepted (nc may wrap it in TLS)
	id          uint64
	role        wire.Role
	peerPort    bool          // accepted on the cluster peer port: role 3 only
	hsElem      *list.Element // on Server.hs.mu: in the handshaking list (nil: out of it, or evicted)
	hsAddrElem  *list.Element // on Server.hs.mu: in its address's active or parked list
	hsAt        int64         // on Server.hs.mu: nanotime it was accepted, or given its slot
	hsActive    bool          // on Server.hs.mu: has a slot of its address (HELLO may be sent)
	hsWake      chan struct{} // a parked connection's wake-up: promoted, evicted, or first in the queue
	hsAddr      string        // source address (handshake caps)
	maxInflight int32

	// reader-owned
	rbuf []byte
	wbuf []byte       // responses of the current batch
	req  wire.Request // the request being handled (a field: passed to the backend without escaping)
	ks   wire.KeySet  // the key set of the S or X being handled
	// batchNow is the table clock read at the batch's start (the write
	// deadline's refresh reuses it: no second clock read per batch)
	batchNow int64

	inflight atomic.Int32 // queued acquires; incremented by the reader only

	mu         sync.Mutex
	writeArmed int64      // on mu: nanotime the write deadline was last set
	flushBy    time.Time  // on mu: Shutdown's final write deadline (zero: none)
	drained    *sync.Cond // on mu: out drained below the limit, or broken
	out        []byte     // answers not yet written
	spare      []byte
	flushing   bool
	broken     bool // write failed or connection torn down: discard output
	pending    map[uint32]struct{}
	changes    map[uint32]struct{} // on mu: changing admin commands running (admin.go clusterChange)
	nChanges   atomic.Int32        // len(changes), read without mu
	wake       chan struct{}
	done       chan struct{}
	stopping   atomic.Bool // server shutdown: discard further requests

	label atomic.Pointer[string] // the connection's label (§12.3); nil: none
	// reader-owned, cluster: the label last replicated (OpLabel) and the
	// leader's serve epoch it was replicated in (raftBackend.withLabel)
	sentLabel *string
	sentEpoch uint64
}

// labelAddr is the connection's label ("" when none) and remote address.
func (c *conn) labelAddr() (string, string) {
	l := ""
	if p := c.label.Load(); p != nil {
		l = *p
	}
	return l, c.raw.RemoteAddr().String()
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:           s,
		nc:          nc,
		raw:         nc,
		id:          s.newConnID(),
		maxInflight: int32(s.cfg.MaxInflight),
		pending:     make(map[uint32]struct{}),
		wake:        make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	c.drained = sync.NewCond(&c.mu)
	return c
}

func (c *conn) serve() {
	defer c.s.wg.Done()
	if tcp, ok := c.nc.(*net.TCPConn); ok {
		setUserTimeout(tcp, userTimeout)
		if c.s.cfg.SendBuffer > 0 && !c.peerPort {
			_ = tcp.SetWriteBuffer(c.s.cfg.SendBuffer)
		}
	}
	if !c.s.hsSlot(c) {
		c.raw.Close()
		return
	}
	ok := c.handshake()
	c.s.hsDone(c)
	if !ok {
		return
	}
	defer c.s.connClosed() // the slot taken by the handshake
	if c.peerPort && c.handOffIfRaft() {
		return
	}
	c.s.register(c)
	if c.s.draining.Load() {
		// Shutdown may have listed the connections just before this one
		// registered: shut it down here, or Shutdown would wait for it.
		c.shutdown(time.Now().Add(c.s.cfg.WriteTimeout))
	}
	c.s.wg.Add(1)
	go c.writeLoop()
	fatal := c.readLoop()
	c.teardown(fatal)
}

// ---------------------------------------------------------------------------
// Handshake (protocol.md §1)

// tlsHintWait is how long a TLS listener waits for the client's first byte
// before it answers a plaintext REJECT TLS_REQUIRED (protocol.md §12.4).
const tlsHintWait = time.Second

// tlsFirstByte waits up to tlsHintWait for the first byte of the client's
// TLS handshake. A client that sent nothing is a plaintext one waiting for
// HELLO: it gets REJECT TLS_REQUIRED in plaintext, then an orderly close,
// and tlsFirstByte reports false. Otherwise the byte is kept for the TLS
// handshake (c.nc reads it first).
func (c *conn) tlsFirstByte() bool {
	now := time.Now()
	end := now.Add(c.s.cfg.HandshakeTimeout) // the handshake deadline (§1)
	hint := now.Add(tlsHintWait)
	if end.Before(hint) {
		hint = end
	}
	_ = c.nc.SetReadDeadline(hint)
	var b [1]byte
	n, err := c.nc.Read(b[:])
	if n == 1 {
		_ = c.nc.SetDeadline(end)
		c.nc = &prefixConn{Conn: c.nc, pre: b[:]}
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		_ = c.nc.SetDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
		c.reject(wire.CodeTLSRequired)
		return false
	}
	c.nc.Close()
	return false
}

// prefixConn reads pre before the connection's own bytes.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// handshake runs HELLO → AUTH → WELCOME/REJECT. It returns true when the
// connection is accepted; otherwise it has closed it.
func (c *conn) handshake() bool {
	s := c.s
	_ = c.nc.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	if cfg := s.tlsCfg.Load(); cfg != nil {
		if !c.tlsFirstByte() {
			return false
		}
		tc := tls.Server(c.nc, cfg)
		if err := tc.Handshake(); err != nil {
			s.log.Debug("tls handshake failed", "remote", c.nc.RemoteAddr().String(), "err", err)
			c.nc.Close()
			return false
		}
		c.nc = tc
	}
	var hello wire.Hello
	if _, err := rand.Read(hello.Nonce[:]); err != nil {
		c.nc.Close()
		return false
	}
	s.noteHello(&hello.Nonce)
	if s.cfg.tokensConfigured() {
		hello.Flags = wire.HelloFlagTokens
	}
	buf := make([]byte, 0, wire.AuthLen)
	if _, err := c.nc.Write(wire.AppendHello(buf, &hello)); err != nil {
		c.nc.Close()
		return false
	}
	ab := buf[:wire.AuthLen]
	if _, err := io.ReadFull(c.nc, ab); err != nil {
		// Timeout or EOF: close without sending anything more (§1).
		c.nc.Close()
		return false
	}
	auth, err := wire.ParseAuth(ab)
	if err != nil || c.peerPort && auth.Role != wire.RolePeer {
		c.reject(wire.CodeBadHandshake)
		return false
	}
	if s.cfg.tokensConfigured() {
		want := wire.ClientProof(s.tokenBytes(auth.Role), auth.Role, &hello.Nonce, &auth.Nonce)
		if !wire.ProofEqual(&want, &auth.Proof) {
			if d := s.authFailed(c.hsAddr); d > 0 {
				time.Sleep(d) // within the handshake deadline's budget and its caps
			}
			c.reject(wire.CodeAuthFailed)
			return false
		}
		s.authSucceeded(c.hsAddr)
	}
	if s.draining.Load() {
		c.reject(wire.CodeShuttingDown)
		return false
	}
	// Authenticated connections only count against max_connections; admin
	// and peer connections have AdminReserve more, so an operator can always
	// get in (issue #22 item 1). The slot is taken before WELCOME.
	limit := int64(s.cfg.MaxConnections)
	if auth.Role != wire.RoleClient {
		limit += int64(s.cfg.AdminReserve)
	}
	n := s.live.Add(1)
	if n > limit {
		s.live.Add(-1)
		c.reject(wire.CodeOverloaded)
		return false
	}
	s.connOpened(n)
	s.hsDone(c) // authenticated: no longer evictable
	c.role = auth.Role
	w := wire.Welcome{
		Status:      wire.WelcomeAccepted,
		MaxInflight: uint32(s.cfg.MaxInflight),
		Proof:       wire.ServerProof(s.tokenBytes(auth.Role), auth.Role, &auth.Nonce, &hello.Nonce),
	}
	if _, err := c.nc.Write(wire.AppendWelcome(buf[:0], &w)); err != nil {
		s.live.Add(-1)
		c.nc.Close()
		return false
	}
	_ = c.nc.SetDeadline(time.Time{})
	c.rbuf = make([]byte, smallReadBuf) // grows to readBufSize once a read fills it
	return true
}

func (c *conn) reject(code wire.Code) {
	c.s.log.Debug("handshake rejected", "remote", c.nc.RemoteAddr().String(), "code", code.String())
	_, _ = c.nc.Write(wire.AppendReject(nil, code))
	c.s.hsDone(c) // answered: its slot is free while it lingers
	c.lingerClose()
}

// lingerClose half-closes the write side, discards input until EOF or 1 s,
// then closes, so the peer can read the final frame (§1 "Closing after an error").
func (c *conn) lingerClose() {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.nc.(closeWriter); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
	var sink [512]byte
	for {
		if _, err := c.nc.Read(sink[:]); err != nil {
			break
		}
	}
	c.nc.Close()
}

// ---------------------------------------------------------------------------
// Read loop: read a batch, process every complete frame, flush once.

// readLoop returns true when the connection must close after a protocol
// error (E BAD_OP, or an admin body above the limit).
func (c *conn) readLoop() (fatal bool) {
	r := 0
	discard := 0        // body bytes still to skip of an admin frame refused from its header
	partial := false    // the frame deadline is armed: a started frame is incomplete
	var partialAt int64 // nanotime it was armed
	for {
		n, err := c.nc.Read(c.rbuf[r:])
		filled := r+n == len(c.rbuf)
		if discard > 0 && n > 0 {
			k := min(discard, n)
			copy(c.rbuf[r:], c.rbuf[r+k:r+n])
			n -= k
			discard -= k
		}
		r += n
		if n > 0 && !c.stopping.Load() {
			now := c.s.nanotime()
			c.batchNow = now
			off := 0
			want := 0 // length of the incomplete frame left at the buffer's start
			for r-off >= wire.HeaderLen {
				flen, ferr := wire.RequestFrameLen(c.rbuf[off:r])
				if ferr != nil {
					c.frameError(c.rbuf[off:r], ferr)
					return true
				}
				if r-off < flen && c.refuseEarly(c.rbuf[off:r]) {
					// Answered from the header (issue #22 item 3): skip the
					// body as it arrives instead of buffering it.
					discard = flen - (r - off)
					r = off
					break
				}
				if r-off < flen {
					want = flen
					if flen > len(c.rbuf) {
						nb := make([]byte, flen)
						copy(nb, c.rbuf[off:r])
						c.rbuf = nb
						r -= off
						off = 0
					}
					break
				}
				// The frame is complete and its length known: decode the
				// header and slice the key or body (what wire.ParseRequest
				// does, without framing it a second time).
				req := &c.req
				*req, _ = wire.ParseRequestHeader(c.rbuf[off : off+flen])
				if req.Op == wire.OpQuery || req.Op == wire.OpAcquireSet || req.Op == wire.OpReleaseSet {
					req.Body = c.rbuf[off+wire.HeaderLen : off+flen : off+flen]
				} else {
					req.Key = c.rbuf[off+wire.HeaderLen : off+flen : off+flen]
				}
				c.handle(now, req)
				off += flen
				if len(c.wbuf) >= c.s.cfg.OutBufferLimit {
					// Large admin replies: flush (and wait for room) inside
					// the batch so output stays bounded (§3.3).
					c.flushBatch()
					now = c.s.nanotime() // the flush may have waited
					c.batchNow = now
				}
			}
			progressed := off > 0 // a frame completed: a partial one now is a new one
			if off > 0 {
				r = copy(c.rbuf, c.rbuf[off:r])
			}
			if len(c.rbuf) < readBufSize && filled && len(c.rbuf) >= r {
				// A read filled the small buffer: this connection is busy.
				nb := make([]byte, readBufSize)
				copy(nb, c.rbuf[:r])
				c.rbuf = nb
			} else if len(c.rbuf) > readBufSize && r <= readBufSize && want <= readBufSize {
				nb := make([]byte, readBufSize)
				copy(nb, c.rbuf[:r])
				c.rbuf = nb
			}
			c.flushBatch()
			// A started frame must complete within FrameTimeout (issue #22
			// item 3); an idle connection (no partial frame) has no deadline.
			// (Re-armed at most 16 times a timeout while frames keep completing.)
			if r > 0 && (!partial || progressed && now-partialAt > int64(c.s.cfg.FrameTimeout/16)) {
				partial, partialAt = true, now
				_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.FrameTimeout))
			} else if r == 0 && partial && !c.stopping.Load() {
				partial = false
				_ = c.nc.SetReadDeadline(time.Time{})
			}
		} else if n > 0 {
			r = 0 // stopping: discard
		}
		if err != nil {
			return false
		}
	}
}

// refuseEarly answers an admin frame from a client-role connection from its
// header alone (checks 2, 3, 4 of §2.1: E BAD_FLAGS, DUPLICATE_REQ_ID or
// NOT_PERMITTED), so its body is never buffered. It reports whether it did.
func (c *conn) refuseEarly(b []byte) bool {
	if b[0] != byte(wire.OpQuery) || c.role != wire.RoleClient {
		return false
	}
	h, _ := wire.ParseRequestHeader(b)
	switch {
	case h.Flags != 0:
		c.replyError(h.ReqID, wire.CodeBadFlags)
	case c.outstanding(h.ReqID):
		c.replyError(h.ReqID, wire.CodeDuplicateReqID)
	default:
		c.replyError(h.ReqID, wire.CodeNotPermitted)
	}
	return true
}

// frameError answers a frame that cannot be framed (§2.1 check 1, or a Q
// body_len above 65,536) and reports that the connection must close.
func (c *conn) frameError(b []byte, ferr error) {
	h, _ := wire.ParseRequestHeader(b)
	code := wire.CodeBadOp
	if errors.Is(ferr, wire.ErrBodyTooLarge) {
		// Run the checks before check 5 so the first failing one answers.
		switch {
		case h.Flags != 0:
			code = wire.CodeBadFlags
		case c.outstanding(h.ReqID):
			code = wire.CodeDuplicateReqID
		case c.role == wire.RoleClient:
			code = wire.CodeNotPermitted
		default:
			code = wire.CodeBadAdmin
		}
	}
	c.replyError(h.ReqID, code)
}

// handle applies one complete request in the order of protocol.md §2.1.
func (c *conn) handle(now int64, req *wire.Request) {
	if req.Flags != 0 {
		if req.Op == wire.OpAcquireSet || req.Op == wire.OpReleaseSet { // offsets 2-3 are body_len (§12.2)
			c.handleSet(now, req)
			return
		}
		c.replyError(req.ReqID, wire.CodeBadFlags)
		return
	}
	if c.outstanding(req.ReqID) {
		c.replyError(req.ReqID, wire.CodeDuplicateReqID)
		return
	}
	switch req.Op {
	case wire.OpAcquire:
		if c.lockOpChecks(req) && c.leaseWaitChecks(req) {
			if g := c.s.grace; g != nil && g.refuse(now, req.LeaseMS()) {
				c.busy(req.ReqID, wire.CodeRecovering) // restart grace (grace.go)
				return
			}
			c.s.lock.acquire(c, now, req)
		}
	case wire.OpRelease:
		if c.lockOpChecks(req) {
			c.s.lock.release(c, now, req)
		}
	case wire.OpCancel:
		if c.lockOpChecks(req) {
			c.s.lock.cancel(c, now, req)
		}
	case wire.OpPing:
		if req.KeyLen != 0 {
			c.replyError(req.ReqID, wire.CodeBadKey)
			return
		}
		if req.Arg == wire.PingArgFeatures { // §12.1: the feature bits in the pong's queued field
			c.wbuf = wire.AppendPongFeatures(c.wbuf, req.ReqID, c.s.features(), uint64(c.s.now().UnixMicro()))
			return
		}
		c.wbuf = wire.AppendPong(c.wbuf, req.ReqID, uint64(c.s.now().UnixMicro()))
	case wire.OpQuery:
		c.query(req)
	case wire.OpLabel:
		if !wire.ValidLabel(req.Key) { // §12.3: the connection keeps its previous label
			c.replyError(req.ReqID, wire.CodeBadLabel)
			return
		}
		l := string(req.Key)
		c.label.Store(&l)
		c.wbuf = wire.AppendStatus(c.wbuf, wire.StatusReleased, wire.CodeNone, req.ReqID)
	case wire.OpAcquireSet, wire.OpReleaseSet:
		c.handleSet(now, req)
	}
}

// handleSet applies S or X in the validation order of protocol.md §12.2.
func (c *conn) handleSet(now int64, req *wire.Request) {
	if req.SetBodyLen() > wire.MaxSetBody {
		c.replyErrorMsg(req.ReqID, wire.CodeBadKeySet, wire.MsgSetBodyTooLong)
		return
	}
	if c.outstanding(req.ReqID) {
		c.replyError(req.ReqID, wire.CodeDuplicateReqID)
		return
	}
	if c.role == wire.RolePeer {
		c.replyError(req.ReqID, wire.CodeNotPermitted)
		return
	}
	if code, msg := wire.ParseKeySet(&c.ks, req.SetCount(), req.Body); code != wire.CodeNone {
		c.replyErrorMsg(req.ReqID, code, msg)
		return
	}
	if req.Op == wire.OpReleaseSet {
		c.s.lock.releaseSet(c, now, req, &c.ks)
		return
	}
	if c.leaseWaitChecks(req) {
		if g := c.s.grace; g != nil && g.refuse(now, req.LeaseMS()) {
			c.busy(req.ReqID, wire.CodeRecovering) // restart grace (grace.go)
			return
		}
		c.s.lock.acquireSet(c, now, req, &c.ks)
	}
}

// lockOpChecks runs checks 4 (role) and 5 (key) for A, R, C.
func (c *conn) lockOpChecks(req *wire.Request) bool {
	if c.role == wire.RolePeer {
		c.replyError(req.ReqID, wire.CodeNotPermitted)
		return false
	}
	if !printableASCII(req.Key) && !wire.ValidKey(req.Key) {
		c.replyError(req.ReqID, wire.CodeBadKey)
		return false
	}
	return true
}

// printableASCII reports whether k is 1..250 bytes, all in 0x20..0x7E: a
// valid key (§2.1 check 5) without decoding UTF-8, 8 bytes at a time. Keys
// it rejects go through wire.ValidKey, which decides.
func printableASCII(k []byte) bool {
	if len(k) == 0 || len(k) > wire.MaxKeyLen {
		return false
	}
	if len(k) < 8 {
		for _, b := range k {
			if b < 0x20 || b >= 0x7f {
				return false
			}
		}
		return true
	}
	for i := 0; i+8 < len(k); i += 8 {
		if !printable8(binary.LittleEndian.Uint64(k[i:])) {
			return false
		}
	}
	return printable8(binary.LittleEndian.Uint64(k[len(k)-8:])) // the last 8, overlapping
}

// printable8 reports whether all 8 bytes of w are in 0x20..0x7E: each below
// 0x80 (so the adds below carry into no neighbour), at least 0x20 (b+0x60
// sets bit 7) and not 0x7F (b+1 leaves bit 7 clear).
func printable8(w uint64) bool {
	const hi, lo, del = 0x8080808080808080, 0x6060606060606060, 0x0101010101010101
	return w&hi == 0 && (w+lo)&hi == hi && (w+del)&hi == 0
}

// leaseWaitChecks runs check 6 for A: lease 1..max_lease, wait 0..max_wait.
func (c *conn) leaseWaitChecks(req *wire.Request) bool {
	lease, wait := req.LeaseMS(), req.WaitMS()
	if lease == 0 || int64(lease) > c.s.cfg.MaxLease.Milliseconds() {
		c.replyError(req.ReqID, wire.CodeBadLease)
		return false
	}
	if int64(wait) > c.s.cfg.MaxWait.Milliseconds() {
		c.replyError(req.ReqID, wire.CodeBadWait)
		return false
	}
	return true
}

// busy answers B code, a refusal the server makes itself (draining,
// max_inflight, an unhealthy clock), counted in status.
func (c *conn) busy(reqID uint32, code wire.Code) {
	c.s.busyExtra.Add(1)
	c.wbuf = wire.AppendStatus(c.wbuf, wire.StatusBusy, code, reqID)
}

// addPending records reqID as outstanding: its answer comes later, through
// deliver. Called by the reader only.
func (c *conn) addPending(reqID uint32) {
	c.mu.Lock()
	c.pending[reqID] = struct{}{}
	c.mu.Unlock()
	c.inflight.Add(1)
}

// dropPending undoes addPending when the request could not be submitted.
func (c *conn) dropPending(reqID uint32) {
	c.mu.Lock()
	delete(c.pending, reqID)
	c.mu.Unlock()
	c.inflight.Add(-1)
}

// outstanding reports whether reqID names one of this connection's queued
// acquires (§2.1 check 3). Only the reader adds entries, so a zero count
// means none without taking the lock.
func (c *conn) outstanding(reqID uint32) bool {
	if c.inflight.Load() == 0 && c.nChanges.Load() == 0 {
		return false
	}
	c.mu.Lock()
	_, ok := c.pending[reqID]
	if !ok {
		_, ok = c.changes[reqID]
	}
	c.mu.Unlock()
	return ok
}

// addChange records reqID as a changing admin command running off the
// reader; its answer comes through deliverChange. Called by the reader.
func (c *conn) addChange(reqID uint32) {
	c.mu.Lock()
	if c.changes == nil {
		c.changes = make(map[uint32]struct{})
	}
	c.changes[reqID] = struct{}{}
	c.nChanges.Store(int32(len(c.changes)))
	c.mu.Unlock()
}

// deliverChange queues the answer frame of a changing admin command, as
// deliver does a queued acquire's (dropped when the connection is gone).
func (c *conn) deliverChange(reqID uint32, frame []byte) {
	c.mu.Lock()
	if _, ok := c.changes[reqID]; !ok {
		c.mu.Unlock()
		return
	}
	delete(c.changes, reqID)
	c.nChanges.Store(int32(len(c.changes)))
	if c.broken {
		c.mu.Unlock()
		return
	}
	c.out = append(c.out, frame...)
	idle := !c.flushing
	c.mu.Unlock()
	if idle {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

var errorText = map[wire.Code]string{
	wire.CodeBadOp:          "unknown op",
	wire.CodeBadKey:         "key must be 1..250 bytes of UTF-8 without control characters (ping: key_len 0)",
	wire.CodeBadLease:       "lease_ms out of range",
	wire.CodeBadWait:        "wait_ms out of range",
	wire.CodeBadFlags:       "flags must be 0",
	wire.CodeDuplicateReqID: "req_id is in use by an outstanding request",
	wire.CodeBadAdmin:       "bad admin query",
	wire.CodeNotPermitted:   "not permitted for this role",
	wire.CodeInternal:       "internal error",
	wire.CodeBadLabel:       "label must be 0..64 bytes of UTF-8 without control characters",
}

func (c *conn) replyError(reqID uint32, code wire.Code) {
	c.replyErrorMsg(reqID, code, errorText[code])
}

func (c *conn) replyErrorMsg(reqID uint32, code wire.Code, msg string) {
	c.s.errorsCount.Add(1)
	c.wbuf = wire.AppendError(c.wbuf, reqID, code, msg)
}

// ---------------------------------------------------------------------------
// Output

// deliver appends an answer made by another request (or a timer) to a queued
// acquire of this connection. Called with that key's shard lock held.
func (c *conn) deliver(e locktable.Effect) {
	c.mu.Lock()
	if _, ok := c.pending[e.Owner.ReqID]; !ok {
		// Already answered (a cluster request failed U before its entry
		// applied, or the connection is gone): exactly one answer each.
		c.mu.Unlock()
		return
	}
	delete(c.pending, e.Owner.ReqID)
	c.inflight.Add(-1)
	if c.broken {
		c.mu.Unlock()
		return
	}
	switch e.Status {
	case wire.StatusGranted:
		c.out = wire.AppendGranted(c.out, e.Owner.ReqID, e.Token, e.Queued)
	case wire.StatusMoved:
		c.out = wire.AppendMoved(c.out, e.Owner.ReqID, c.s.leaderAddr())
	default:
		c.out = wire.AppendStatus(c.out, e.Status, e.Code, e.Owner.ReqID)
	}
	idle := !c.flushing
	c.mu.Unlock()
	if idle {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	for {
		select {
		case <-c.wake:
			c.flush()
		case <-c.done:
			return
		}
	}
}

// flushBatch writes the reader's batch of responses, after any answers
// already waiting in out (so a cancel's T precedes its O), then waits while
// the unsent output is above the bound (backpressure, §3.3).
func (c *conn) flushBatch() {
	if len(c.wbuf) == 0 {
		return
	}
	c.mu.Lock()
	if c.broken {
		c.mu.Unlock()
		c.wbuf = c.wbuf[:0]
		return
	}
	if c.flushing || len(c.out) > 0 {
		c.out = append(c.out, c.wbuf...)
		c.resetWbuf()
		if c.flushing {
			for len(c.out) > c.s.cfg.OutBufferLimit && !c.broken {
				c.drained.Wait()
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.flush()
		return
	}
	c.flushing = true
	c.armWriteLocked(c.batchNow)
	c.mu.Unlock()
	_, err := c.nc.Write(c.wbuf)
	c.resetWbuf()
	c.mu.Lock()
	if err != nil {
		c.breakLocked()
	}
	c.drainLocked()
	c.mu.Unlock()
}

func (c *conn) resetWbuf() {
	if cap(c.wbuf) > keepBufLimit {
		c.wbuf = nil
		return
	}
	c.wbuf = c.wbuf[:0]
}

// flush writes everything in out; only one goroutine writes at a time.
func (c *conn) flush() {
	c.mu.Lock()
	if c.flushing {
		c.mu.Unlock()
		return
	}
	c.flushing = true
	c.drainLocked()
	c.mu.Unlock()
}

// armWriteLocked sets the write deadline WriteTimeout ahead (issue #22
// item 2), unless it was set less than 1/16 of it ago: the next write then
// still has at least 15/16 of the bound, and a busy connection updates its
// deadline timer a few times a timeout, not at every write. Called with mu
// held by the goroutine about to write; after Shutdown set the final
// deadline, that one stays.
func (c *conn) armWriteLocked(now int64) {
	if !c.flushBy.IsZero() {
		return
	}
	d := c.s.cfg.WriteTimeout
	if now-c.writeArmed < int64(d/16) && c.writeArmed != 0 {
		return
	}
	c.writeArmed = now
	_ = c.nc.SetWriteDeadline(time.Now().Add(d))
}

// waitFlushed returns once everything queued in out is written (or the
// connection broke): it writes itself when no one else is writing, and
// otherwise waits for the goroutine that is. Every path that closes or
// half-closes the socket calls it first, so no answer queued before is
// lost (issue #22 item 9). Each write is bounded by the write timeout.
func (c *conn) waitFlushed() {
	c.mu.Lock()
	for (c.flushing || len(c.out) > 0) && !c.broken {
		if !c.flushing {
			c.flushing = true
			c.drainLocked()
			continue
		}
		c.drained.Wait()
	}
	c.mu.Unlock()
}

// drainLocked writes out until it is empty, releasing mu around each write,
// then clears flushing. Called with mu held and flushing set by the caller.
func (c *conn) drainLocked() {
	for len(c.out) > 0 && !c.broken {
		b := c.out
		c.out = c.spare[:0]
		c.armWriteLocked(c.s.nanotime())
		c.mu.Unlock()
		_, err := c.nc.Write(b)
		c.mu.Lock()
		if cap(b) <= keepBufLimit {
			c.spare = b[:0]
		} else {
			c.spare = nil
		}
		if err != nil {
			c.breakLocked()
		}
	}
	c.flushing = false
	c.drained.Broadcast()
}

// breakLocked marks output dead (a write failed): the reader's next read
// fails too since the socket is closed.
func (c *conn) breakLocked() {
	if !c.broken {
		c.broken = true
		c.out = nil
		c.nc.Close()
	}
	c.drained.Broadcast()
}

// teardown runs once the read loop ended: the connection's waiters leave
// their queues silently; its locks stay held (§5).
func (c *conn) teardown(fatal bool) {
	c.s.lock.connGone(c)
	c.mu.Lock()
	clear(c.pending)
	c.inflight.Store(0)
	clear(c.changes)
	c.nChanges.Store(0)
	c.mu.Unlock()
	if len(c.wbuf) > 0 {
		c.flushBatch()
	}
	c.waitFlushed()
	close(c.done)
	c.s.unregister(c)
	if fatal {
		c.lingerClose()
	} else {
		c.nc.Close()
	}
	c.mu.Lock()
	c.broken = true
	c.drained.Broadcast()
	c.mu.Unlock()
}

// shutdown is called by Server.Shutdown after the waiters were answered:
// stop processing input, write what is queued (until flushBy at the
// latest), half-close, and let the reader end on EOF or after 1 s.
func (c *conn) shutdown(flushBy time.Time) {
	c.stopping.Store(true)
	c.mu.Lock()
	if c.flushBy.IsZero() {
		c.flushBy = flushBy
		_ = c.nc.SetWriteDeadline(flushBy)
	}
	c.mu.Unlock()
	c.waitFlushed()
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.nc.(closeWriter); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
}
