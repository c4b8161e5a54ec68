package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Connection design.
//
// Each conn is one persistent connection to one address, kept by one
// supervisor goroutine (run): dial, handshake, serve, and after a loss back
// off and dial again, until Close. While a connection is up there are
// exactly two goroutines: the supervisor, which is the writer, and a reader.
//
//   - Senders encode their frame straight into cn.wbuf under cn.mu, register
//     the call in cn.pending under a fresh req_id, and kick the writer.
//   - The writer, once kicked, yields once (so that runnable senders append
//     too), swaps wbuf for its spare buffer and writes the whole batch with
//     one Write; frames queued meanwhile go out in the next batch. The
//     batch number (taken) tells later which calls may have reached the
//     socket: a call with seq < taken was handed to it ("written"), any
//     other was not ("unsent") and is safe to retry.
//   - The reader reads large chunks, decodes every complete response under
//     one cn.mu acquisition, and completes the calls after unlocking.
//   - kill, called by whichever side sees the failure first (or by Close),
//     marks the connection down, closes the socket and completes every
//     pending call as unsent or lost.
//
// Lock order: cn.mu → releaser.mu → notifier.mu. Completions (sends on a
// call's done channel, the releaser, compensation) run after cn.mu is
// released; the reader never blocks on a caller.

type connState uint8

const (
	stateDown connState = iota
	stateUp
)

type enqResult uint8

const (
	enqOK          enqResult = iota
	enqDown                  // not connected (or its write buffer is over its bound)
	enqFull                  // connected, but all of max_inflight is in use
	enqUnsupported           // connected, but its server does not announce a feature the call needs
)

const readBufSize = 64 << 10

var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

type conn struct {
	cl   *Client
	addr string
	tls  *tls.Config
	kick chan struct{} // capacity 1: wakes the writer

	mu          sync.Mutex
	state       connState
	nc          net.Conn // the live connection, nil when down
	everUp      bool
	failures    int           // failed attempts since the last successful handshake
	cfgErr      error         // the last attempt failed for a configuration reason (auth, TLS); nil once up
	maxInflight int           // from WELCOME
	features    wire.Features // from the feature pong (protocol.md §12.1), per connection
	inflight    int           // outstanding calls with counts
	pending     map[uint32]*call
	nextID      uint32
	wbuf        []byte
	seq         uint64 // frames queued on this connection
	taken       uint64 // frames taken by the writer

	spare []byte // the writer's second buffer (supervisor goroutine only)
}

func newConn(cl *Client, addr string, tcfg *tls.Config) *conn {
	return &conn{
		cl:      cl,
		addr:    addr,
		tls:     tcfg,
		kick:    make(chan struct{}, 1),
		pending: make(map[uint32]*call),
	}
}

// run is the supervisor: connect, serve, back off, forever until Close.
func (cn *conn) run() {
	defer cn.cl.wg.Done()
	cl := cn.cl
	attempt := 0 // failures since the last connection; the delay before the next try grows with it
	for {
		if attempt > 0 {
			d := cl.backoffDelay(attempt)
			if h := cl.cfg.onReconnect; h != nil {
				h(cn, attempt, d)
			}
			if !cl.sleep(d) {
				return
			}
		}
		nc, w, err := cn.connect()
		if err != nil {
			if cl.closed.Load() {
				return
			}
			cn.failed(err)
			attempt++
			continue
		}
		if !cn.up(nc, w) {
			nc.Close()
			return
		}
		cn.serve(nc)
		if cl.closed.Load() {
			return
		}
		attempt = 1
	}
}

// connect dials and runs the handshake, bounded by the dial timeout; Close
// interrupts it.
func (cn *conn) connect() (net.Conn, wire.Welcome, error) {
	cl := cn.cl
	ctx, cancel := context.WithTimeout(cl.ctx, cl.cfg.dialTimeout)
	defer cancel()
	d := net.Dialer{KeepAliveConfig: keepAlive}
	raw, err := d.DialContext(ctx, "tcp", cn.addr)
	if err != nil {
		return nil, wire.Welcome{}, err
	}
	// Closing the socket interrupts a blocked TLS handshake or read.
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	nc, w, err := cn.handshake(ctx, raw)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		raw.Close()
		if cl.closed.Load() {
			err = ErrClosed
		}
		return nil, wire.Welcome{}, err
	}
	return nc, w, nil
}

func (cn *conn) handshake(ctx context.Context, raw net.Conn) (net.Conn, wire.Welcome, error) {
	cl := cn.cl
	nc := raw
	if cn.tls != nil {
		tc := tls.Client(raw, cn.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			var rh tls.RecordHeaderError
			if errors.As(err, &rh) {
				return nil, wire.Welcome{}, &configError{fmt.Errorf("%w: the server does not speak TLS (its first bytes are not a TLS record; is it a plaintext listener?): %w", ErrTLS, err)}
			}
			var ve *tls.CertificateVerificationError
			if errors.As(err, &ve) {
				return nil, wire.Welcome{}, &configError{fmt.Errorf("%w: handshake: %w", ErrTLS, err)}
			}
			return nil, wire.Welcome{}, fmt.Errorf("%w: handshake: %w", ErrTLS, err)
		}
		nc = tc
	}
	var first *firstBytes
	hs := io.ReadWriter(nc)
	if cn.tls == nil {
		first = &firstBytes{Conn: nc}
		hs = first
	}
	h, w, err := wire.ClientHandshake(hs, cl.role, cl.token)
	switch {
	case errors.Is(err, wire.ErrBadMagic) && first != nil && first.n >= 2 && first.b[0] == byte(wire.StatusError) && wire.Code(first.b[1]) == wire.CodeTLSRequired,
		errors.Is(err, wire.ErrRejected) && w.Code == wire.CodeTLSRequired:
		return nil, w, &configError{fmt.Errorf("%w: the server requires TLS (REJECT TLS_REQUIRED; configure the client with TLS)", ErrTLS)}
	case errors.Is(err, wire.ErrRejected):
		rej := &RejectError{Code: w.Code}
		if w.Code == wire.CodeAuthFailed && len(cl.token) == 0 && h.TokensConfigured() {
			return nil, w, fmt.Errorf("%w (the server requires a token and none is configured)", rej)
		}
		return nil, w, rej
	case errors.Is(err, wire.ErrServerProof):
		return nil, w, fmt.Errorf("%w: the server did not prove the token (an impostor, or a server without this token)", ErrAuth)
	case err != nil:
		return nil, wire.Welcome{}, err
	}
	if w.MaxInflight == 0 {
		w.MaxInflight = 1
	}
	f, err := cn.negotiate(nc)
	if err != nil {
		return nil, w, err
	}
	cn.mu.Lock()
	cn.features = f
	cn.mu.Unlock()
	return nc, w, nil
}

// firstBytes remembers the first two bytes read from a plaintext
// connection: a TLS listener's REJECT TLS_REQUIRED (protocol.md §12.4)
// arrives where HELLO was expected and begins 'E', 12.
type firstBytes struct {
	net.Conn
	b [2]byte
	n int
}

func (f *firstBytes) Read(p []byte) (int, error) {
	k, err := f.Conn.Read(p)
	for i := 0; i < k && f.n < len(f.b); i++ {
		f.b[f.n] = p[i]
		f.n++
	}
	return k, err
}

// configError marks a connection failure that retrying will not cure (a
// TLS mismatch or certificate failure): calls waiting for a connection
// fail with it at once (R4, R5), like an authentication failure.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

func isConfigErr(err error) bool {
	var ce *configError
	return errors.Is(err, ErrAuth) || errors.As(err, &ce)
}

// failed records a failed connection attempt.
func (cn *conn) failed(err error) {
	cn.mu.Lock()
	cn.cfgErr = nil
	if isConfigErr(err) {
		cn.cfgErr = err
	}
	cn.failures++
	n := cn.failures
	cn.mu.Unlock()
	cn.cl.setLastErr(err)
	lvl := slog.LevelDebug
	if n == 1 {
		lvl = slog.LevelWarn
	}
	if isConfigErr(err) {
		lvl = slog.LevelError
	}
	cn.cl.log.Log(context.Background(), lvl, "ticketing: connect failed", "addr", cn.addr, "attempt", n, "err", err)
	cn.cl.notify.broadcast()
}

// up installs a handshaken connection; false when the client closed meanwhile.
func (cn *conn) up(nc net.Conn, w wire.Welcome) bool {
	cn.mu.Lock()
	if cn.cl.closed.Load() {
		cn.mu.Unlock()
		return false
	}
	cn.state = stateUp
	cn.nc = nc
	cn.everUp = true
	cn.failures = 0
	cn.cfgErr = nil
	cn.maxInflight = int(min(w.MaxInflight, 1<<30))
	cn.inflight = 0
	cn.nextID = 0
	cn.seq, cn.taken = 0, 0
	cn.wbuf = cn.wbuf[:0]
	cn.mu.Unlock()
	cn.cl.log.Info("ticketing: connected", "addr", cn.addr, "max_inflight", w.MaxInflight)
	cn.cl.notify.broadcast()
	return true
}

// serve runs the reader and the writer until the connection fails.
func (cn *conn) serve(nc net.Conn) {
	readerDone := make(chan struct{})
	go cn.readLoop(nc, readerDone)
	err := cn.writeLoop(nc, readerDone)
	cn.kill(nc, err)
	<-readerDone
}

var errReaderStopped = errors.New("reader stopped")

func (cn *conn) writeLoop(nc net.Conn, readerDone <-chan struct{}) error {
	for {
		select {
		case <-cn.kick:
		case <-readerDone:
			return errReaderStopped
		case <-cn.cl.closing:
			return ErrClosed
		}
		if h := cn.cl.cfg.beforeWrite; h != nil {
			h(cn)
		}
		// Let the senders that are runnable now append their frames first:
		// one write then carries many frames (a write syscall costs far more
		// than a yield when nobody else is runnable).
		runtime.Gosched()
		cn.mu.Lock()
		if cn.nc != nc {
			cn.mu.Unlock()
			return errReaderStopped
		}
		buf := cn.wbuf
		frames := cn.seq - cn.taken
		cn.wbuf = cn.spare[:0]
		cn.taken = cn.seq
		cn.mu.Unlock()
		if frames > 0 {
			cn.cl.stats.writes.Add(1)
			cn.cl.stats.frames.Add(int64(frames))
		}
		if len(buf) > 0 {
			if _, err := nc.Write(buf); err != nil {
				return err
			}
		}
		if len(buf) > maxWriteBuffer {
			cn.cl.notify.broadcast() // senders may be waiting for this connection to drain
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not keep a burst's buffer forever
		}
		cn.spare = buf[:0]
	}
}

// enqueue queues c's frame for writing under a fresh req_id.
func (cn *conn) enqueue(c *call) enqResult {
	cn.mu.Lock()
	if cn.state != stateUp || len(cn.wbuf) > maxWriteBuffer {
		cn.mu.Unlock()
		return enqDown
	}
	if c.need != 0 && !cn.features.Has(c.need) {
		cn.mu.Unlock()
		return enqUnsupported
	}
	if c.counts && cn.inflight >= cn.maxInflight {
		cn.mu.Unlock()
		return enqFull
	}
	cn.enqueueLocked(c)
	cn.mu.Unlock()
	cn.wake()
	return enqOK
}

func (cn *conn) wake() {
	select {
	case cn.kick <- struct{}{}:
	default:
	}
}

func (cn *conn) enqueueLocked(c *call) {
	id := cn.allocID()
	c.cn = cn
	c.reqID = id
	c.seq = cn.seq
	c.pending = true
	cn.seq++
	cn.pending[id] = c
	if c.counts {
		cn.inflight++
	}
	switch c.op {
	case wire.OpAcquire:
		c.sent = time.Now() // t_send (protocol.md §5): before the frame can be written
		cn.wbuf = wire.AppendAcquire(cn.wbuf, id, c.key, wire.ArgLeaseMS(c.arg), wire.ArgWaitMS(c.arg))
	case wire.OpRelease:
		cn.wbuf = wire.AppendRelease(cn.wbuf, id, c.key, c.arg)
	case wire.OpCancel:
		cn.wbuf = wire.AppendCancel(cn.wbuf, id, c.key, wire.ArgTarget(c.arg))
	case wire.OpPing:
		c.sent = time.Now()
		cn.wbuf = wire.AppendPing(cn.wbuf, id)
	case wire.OpQuery:
		cn.wbuf = wire.AppendQuery(cn.wbuf, id, c.body)
	case wire.OpAcquireSet:
		c.sent = time.Now()
		cn.wbuf = wire.AppendAcquireSet(cn.wbuf, id, c.keys, wire.ArgLeaseMS(c.arg), wire.ArgWaitMS(c.arg))
	case wire.OpReleaseSet:
		cn.wbuf = wire.AppendReleaseSet(cn.wbuf, id, c.keys, c.arg)
	}
}

// allocID returns the next req_id that no outstanding request of this
// connection uses (protocol.md §2.1 check 3). 0 is skipped.
func (cn *conn) allocID() uint32 {
	for {
		cn.nextID++
		if cn.nextID == 0 {
			continue
		}
		if _, busy := cn.pending[cn.nextID]; !busy {
			return cn.nextID
		}
	}
}

// abandon is called when c's sender gives up (its context ended). It returns
// false when c was already answered: the answer is (or is about to be) on
// c.done and the sender must take it. Otherwise the call is left to the
// reader, which compensates a grant; a queued acquire is withdrawn with C
// (protocol.md §2, §5) on the same connection.
func (cn *conn) abandon(c *call) bool {
	cn.mu.Lock()
	if !c.pending {
		cn.mu.Unlock()
		return false
	}
	cn.disownLocked(c)
	if (c.op == wire.OpAcquire || c.op == wire.OpAcquireSet) && c.counts {
		cc := getCall()
		cc.op = wire.OpCancel
		cc.key = c.key // a set's first key (§12.2)
		cc.arg = wire.CancelArg(c.reqID)
		cn.cl.abandoned.Add(1)
		cc.owner = ownerAbandoned
		cn.enqueueLocked(cc)
	}
	cn.mu.Unlock()
	cn.wake()
	return true
}

// drop leaves a pending call whose answer no longer matters to the reader,
// uncounted by Drain; false when it was already answered (take it from
// c.done).
func (cn *conn) drop(c *call) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if !c.pending {
		return false
	}
	c.owner = ownerDropped
	return true
}

// disownLocked leaves a pending call to the reader (ownerAbandoned),
// counted in cl.abandoned until it completes (Drain). Called with cn.mu held
// and c.pending true.
func (cn *conn) disownLocked(c *call) {
	if c.owner != ownerAbandoned {
		c.owner = ownerAbandoned
		cn.cl.abandoned.Add(1)
	}
}

// kill takes nc down (once) and completes every pending call as unsent or lost.
func (cn *conn) kill(nc net.Conn, cause error) {
	cn.mu.Lock()
	if cn.nc != nc || cn.state != stateUp {
		cn.mu.Unlock()
		return
	}
	cn.state = stateDown
	cn.nc = nil
	calls := make([]*call, 0, len(cn.pending))
	for id, c := range cn.pending {
		delete(cn.pending, id)
		c.pending = false
		if c.seq < cn.taken {
			c.fail = failLost
		} else {
			c.fail = failUnsent
		}
		c.failErr = cause
		calls = append(calls, c)
	}
	cn.inflight = 0
	cn.wbuf = cn.wbuf[:0]
	cn.mu.Unlock()
	nc.Close()
	if !errors.Is(cause, ErrClosed) {
		cn.cl.setLastErr(cause)
		cn.cl.log.Warn("ticketing: connection lost", "addr", cn.addr, "pending", len(calls), "err", cause)
	}
	for _, c := range calls {
		cn.cl.complete(c)
	}
	cn.cl.notify.broadcast()
}

// shutdown kills the live connection, if any (Close).
func (cn *conn) shutdown() {
	cn.mu.Lock()
	nc := cn.nc
	cn.mu.Unlock()
	if nc != nil {
		cn.kill(nc, ErrClosed)
	}
}

// status for connection choice.
func (cn *conn) connecting() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.state == stateDown && !cn.everUp && cn.failures == 0
}

func (cn *conn) isUp() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.state == stateUp
}

var errProtocol = errors.New("ticketing: protocol violation by the server")

func (cn *conn) readLoop(nc net.Conn, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, readBufSize)
	batch := make([]*call, 0, 64)
	start, end := 0, 0
	for {
		n, err := nc.Read(buf[end:])
		end += n
		if n > 0 {
			var perr error
			batch, start, perr = cn.dispatch(buf, start, end, batch[:0])
			for i, c := range batch {
				cn.cl.complete(c)
				batch[i] = nil
			}
			if perr != nil {
				cn.kill(nc, perr)
				return
			}
			if start == end {
				start, end = 0, 0
				if len(buf) > 4*readBufSize {
					buf = make([]byte, readBufSize)
				}
			} else {
				need := frameLen(buf[start:end])
				if need > len(buf) {
					nb := make([]byte, need)
					end = copy(nb, buf[start:end])
					buf, start = nb, 0
				} else if start+need > len(buf) || end == len(buf) {
					end = copy(buf, buf[start:end])
					start = 0
				}
			}
		}
		if err != nil {
			cn.kill(nc, err)
			return
		}
	}
}

// frameLen is the length of the (incomplete) response starting b, as far as
// its header tells; HeaderLen while the header is incomplete or wrong
// (ParseResponse then reports the violation).
func frameLen(b []byte) int {
	n, err := wire.ResponseFrameLen(b)
	if err != nil {
		return wire.HeaderLen
	}
	return n
}

// dispatch decodes every complete response in buf[start:end] and matches it
// to its pending call. It returns the completed calls and the new start.
func (cn *conn) dispatch(buf []byte, start, end int, batch []*call) ([]*call, int, error) {
	var (
		perr    error
		freed   bool
		unknown int
		dup     int
	)
	cn.mu.Lock()
	for {
		resp, m, err := wire.ParseResponse(buf[start:end])
		if err != nil {
			perr = fmt.Errorf("%w: %w", errProtocol, err)
			break
		}
		if m == 0 {
			break
		}
		start += m
		c := cn.pending[resp.ReqID]
		if c == nil {
			unknown++
			continue
		}
		if resp.Status == wire.StatusError && resp.Code == wire.CodeDuplicateReqID {
			// Never complete an outstanding request with a code-25 E (§2.1).
			dup++
			continue
		}
		if !fits(c.op, resp.Status) {
			perr = fmt.Errorf("%w: %q answered with %q", errProtocol, rune(c.op), rune(resp.Status))
			break
		}
		delete(cn.pending, resp.ReqID)
		c.pending = false
		if c.counts {
			cn.inflight--
			freed = true
		}
		c.status = resp.Status
		c.code = resp.Code
		c.queued = resp.Queued
		c.value = resp.Value
		if len(resp.Payload) > 0 {
			c.payload = append([]byte(nil), resp.Payload...)
		}
		batch = append(batch, c)
	}
	cn.mu.Unlock()
	if unknown > 0 || dup > 0 {
		cn.cl.log.Warn("ticketing: unexpected responses ignored", "addr", cn.addr, "unknown_req_id", unknown, "duplicate_req_id", dup)
	}
	if freed {
		cn.cl.notify.broadcast()
	}
	return batch, start, perr
}
