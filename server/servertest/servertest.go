// Package servertest is a small raw-protocol Ticketing client for tests: it
// speaks the bytes of protocol.md through client/wire with nothing hidden
// (no retries, no req_id bookkeeping, no proof checks it is not asked for),
// so conformance tests can send any frame, valid or not, and look at every
// byte the server answers. Every read has a deadline, so a server that does
// not answer fails the test instead of hanging it.
//
// It works against any server address: the in-process server of the server
// package's tests, or the built binary.
package servertest

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// DefaultTimeout bounds every read and write unless Options.Timeout says
// otherwise. It is generous: it only turns a hang into a failure.
const DefaultTimeout = 10 * time.Second

// Options configure Dial.
type Options struct {
	Role    wire.Role     // default wire.RoleAdmin
	Token   string        // the role's token ("" = none)
	TLS     *tls.Config   // nil = plaintext
	Timeout time.Duration // per read/write; default DefaultTimeout
	// SkipProofCheck skips verifying the WELCOME's server_proof.
	SkipProofCheck bool
}

// Conn is one raw connection to a server.
type Conn struct {
	TB      testing.TB
	NC      net.Conn
	Timeout time.Duration
	Hello   wire.Hello   // after ReadHello
	Welcome wire.Welcome // after a successful handshake
	Auth    wire.Auth    // the AUTH sent by Dial

	buf    []byte // bytes read but not yet consumed
	nextID uint32
}

// DialRaw opens a TCP (or TLS) connection without any handshake.
func DialRaw(tb testing.TB, addr string, tlsCfg *tls.Config) *Conn {
	tb.Helper()
	c, err := DialRawErr(addr, tlsCfg)
	if err != nil {
		tb.Fatalf("servertest: dial %s: %v", addr, err)
	}
	c.TB = tb
	tb.Cleanup(func() { c.NC.Close() })
	return c
}

// DialRawErr is DialRaw without a testing.TB (for goroutines and benchmarks);
// the caller closes NC.
func DialRawErr(addr string, tlsCfg *tls.Config) (*Conn, error) {
	d := net.Dialer{Timeout: DefaultTimeout}
	var nc net.Conn
	var err error
	if tlsCfg != nil {
		nc, err = tls.DialWithDialer(&d, "tcp", addr, tlsCfg)
	} else {
		nc, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	return &Conn{NC: nc, Timeout: DefaultTimeout, nextID: 1 << 30}, nil
}

// Wrap makes a Conn of an already connected net.Conn (e.g. one end of
// net.Pipe or a Unix socket). It closes nc when the test ends.
func Wrap(tb testing.TB, nc net.Conn) *Conn {
	tb.Cleanup(func() { nc.Close() })
	return &Conn{TB: tb, NC: nc, Timeout: DefaultTimeout, nextID: 1 << 30}
}

// Dial connects and runs the handshake as opts say; it fails the test when
// the server rejects it or its server_proof is wrong.
func Dial(tb testing.TB, addr string, opts Options) *Conn {
	tb.Helper()
	c := DialRaw(tb, addr, opts.TLS)
	if opts.Timeout > 0 {
		c.Timeout = opts.Timeout
	}
	if err := c.Handshake(opts); err != nil {
		tb.Fatalf("servertest: handshake with %s: %v", addr, err)
	}
	return c
}

// Handshake reads HELLO, sends a correct AUTH for opts.Role/opts.Token and
// reads the WELCOME, verifying server_proof unless opts.SkipProofCheck.
func (c *Conn) Handshake(opts Options) error {
	role := opts.Role
	if role == 0 {
		role = wire.RoleAdmin
	}
	h, err := c.ReadHelloErr()
	if err != nil {
		return err
	}
	c.Auth = NewAuth(role, opts.Token, &h)
	if err := c.WriteErr(wire.AppendAuth(nil, &c.Auth)); err != nil {
		return err
	}
	w, err := c.ReadWelcomeErr()
	if err != nil {
		return err
	}
	if !w.Accepted() {
		return fmt.Errorf("rejected: %v", w.Code)
	}
	if !opts.SkipProofCheck {
		want := wire.ServerProof([]byte(opts.Token), role, &c.Auth.Nonce, &h.Nonce)
		if !wire.ProofEqual(&want, &w.Proof) {
			return errors.New("wrong server_proof")
		}
	}
	return nil
}

// NewAuth builds an AUTH for role with a fresh random client nonce and the
// proof computed with token over h's server nonce.
func NewAuth(role wire.Role, token string, h *wire.Hello) wire.Auth {
	a := wire.Auth{Role: role}
	_, _ = rand.Read(a.Nonce[:])
	a.Proof = wire.ClientProof([]byte(token), role, &h.Nonce, &a.Nonce)
	return a
}

// ---------------------------------------------------------------------------
// Raw I/O

// Write writes b whole (with the write deadline) or fails the test.
func (c *Conn) Write(b []byte) {
	c.TB.Helper()
	if err := c.WriteErr(b); err != nil {
		c.TB.Fatalf("servertest: write: %v", err)
	}
}

// WriteErr writes b whole with the write deadline.
func (c *Conn) WriteErr(b []byte) error {
	_ = c.NC.SetWriteDeadline(time.Now().Add(c.Timeout))
	_, err := c.NC.Write(b)
	return err
}

// fill reads until at least n bytes are buffered, or the deadline.
func (c *Conn) fill(n int, deadline time.Time) error {
	for len(c.buf) < n {
		_ = c.NC.SetReadDeadline(deadline)
		if cap(c.buf)-len(c.buf) < 4096 {
			nb := make([]byte, len(c.buf), max(2*len(c.buf), 64<<10))
			copy(nb, c.buf)
			c.buf = nb
		}
		m, err := c.NC.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+m]
		if err != nil && len(c.buf) < n {
			return err
		}
	}
	return nil
}

// ReadExact returns the next n bytes.
func (c *Conn) ReadExact(n int) ([]byte, error) {
	if err := c.fill(n, time.Now().Add(c.Timeout)); err != nil {
		return nil, err
	}
	out := append([]byte(nil), c.buf[:n]...)
	c.consume(n)
	return out, nil
}

func (c *Conn) consume(n int) {
	c.buf = c.buf[n:] // fill moves the rest to a new buffer when it runs out of room
}

// Buffered is the number of received bytes not yet consumed.
func (c *Conn) Buffered() int { return len(c.buf) }

// ReadHello reads and parses HELLO.
func (c *Conn) ReadHello() wire.Hello {
	c.TB.Helper()
	h, err := c.ReadHelloErr()
	if err != nil {
		c.TB.Fatalf("servertest: HELLO: %v", err)
	}
	return h
}

// ReadHelloErr reads and parses HELLO.
func (c *Conn) ReadHelloErr() (wire.Hello, error) {
	b, err := c.ReadExact(wire.HelloLen)
	if err != nil {
		return wire.Hello{}, err
	}
	h, err := wire.ParseHello(b)
	c.Hello = h
	return h, err
}

// ReadWelcome reads and parses WELCOME or REJECT.
func (c *Conn) ReadWelcome() wire.Welcome {
	c.TB.Helper()
	w, err := c.ReadWelcomeErr()
	if err != nil {
		c.TB.Fatalf("servertest: WELCOME: %v", err)
	}
	return w
}

// ReadWelcomeErr reads and parses WELCOME or REJECT.
func (c *Conn) ReadWelcomeErr() (wire.Welcome, error) {
	b, err := c.ReadExact(wire.WelcomeLen)
	if err != nil {
		return wire.Welcome{}, err
	}
	w, err := wire.ParseWelcome(b)
	c.Welcome = w
	return w, err
}

// ReadResponseErr reads the next response within d. Its payload is a copy.
func (c *Conn) ReadResponseErr(d time.Duration) (wire.Response, error) {
	deadline := time.Now().Add(d)
	if err := c.fill(wire.HeaderLen, deadline); err != nil {
		return wire.Response{}, err
	}
	for {
		r, n, err := wire.ParseResponse(c.buf)
		if err != nil {
			return wire.Response{}, fmt.Errorf("%w (header % x)", err, c.buf[:wire.HeaderLen])
		}
		if n > 0 {
			r.Payload = append([]byte(nil), r.Payload...)
			c.consume(n)
			return r, nil
		}
		if err := c.fill(len(c.buf)+1, deadline); err != nil {
			return wire.Response{}, err
		}
	}
}

// Read returns the next response or fails the test after the timeout.
func (c *Conn) Read() wire.Response {
	c.TB.Helper()
	r, err := c.ReadResponseErr(c.Timeout)
	if err != nil {
		c.TB.Fatalf("servertest: reading a response: %v", err)
	}
	return r
}

// ReadN reads n responses.
func (c *Conn) ReadN(n int) []wire.Response {
	c.TB.Helper()
	out := make([]wire.Response, 0, n)
	for range n {
		out = append(out, c.Read())
	}
	return out
}

// ExpectNothing fails the test if a byte arrives within d (the connection
// must stay open and silent).
func (c *Conn) ExpectNothing(d time.Duration) {
	c.TB.Helper()
	if len(c.buf) > 0 {
		c.TB.Fatalf("servertest: unexpected bytes already buffered: % x", c.buf)
	}
	err := c.fill(1, time.Now().Add(d))
	switch {
	case err == nil:
		c.TB.Fatalf("servertest: expected silence, got % x", c.buf)
	case isTimeout(err):
	default:
		c.TB.Fatalf("servertest: expected silence on an open connection, got %v", err)
	}
}

// ExpectEOF fails the test unless the server closes the connection (after
// any buffered bytes) within the timeout, with nothing more sent.
func (c *Conn) ExpectEOF() {
	c.TB.Helper()
	if err := c.WaitEOF(); err != nil {
		c.TB.Fatal(err)
	}
}

// WaitEOF is ExpectEOF returning an error.
func (c *Conn) WaitEOF() error {
	if len(c.buf) > 0 {
		return fmt.Errorf("servertest: expected EOF, got % x", c.buf)
	}
	err := c.fill(1, time.Now().Add(c.Timeout))
	switch {
	case err == nil:
		return fmt.Errorf("servertest: expected EOF, got % x", c.buf)
	case errors.Is(err, io.EOF) || isReset(err):
		return nil
	default:
		return fmt.Errorf("servertest: expected EOF, got %v", err)
	}
}

// ReadAll reads until EOF (or the timeout, which is an error) and returns
// every byte not yet consumed.
func (c *Conn) ReadAll() ([]byte, error) {
	deadline := time.Now().Add(c.Timeout)
	for {
		err := c.fill(len(c.buf)+1, deadline)
		if err != nil {
			out := c.buf
			c.buf = nil
			if errors.Is(err, io.EOF) || isReset(err) {
				return out, nil
			}
			return out, err
		}
	}
}

// CloseWrite half-closes the client's write side (TCP or TLS).
func (c *Conn) CloseWrite() error {
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.NC.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errors.New("servertest: connection cannot half-close")
}

// Close closes the connection.
func (c *Conn) Close() error { return c.NC.Close() }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// ---------------------------------------------------------------------------
// Requests

// NextID returns a fresh req_id (counting up from 2^30, so tests can pick
// small ids themselves without colliding).
func (c *Conn) NextID() uint32 {
	c.nextID++
	return c.nextID
}

// Do writes one request frame and reads one response, which must carry the
// frame's req_id.
func (c *Conn) Do(frame []byte) wire.Response {
	c.TB.Helper()
	c.Write(frame)
	r := c.Read()
	if want := reqIDOf(frame); r.ReqID != want {
		c.TB.Fatalf("servertest: response %s for req_id %d, want req_id %d", Describe(r), r.ReqID, want)
	}
	return r
}

func reqIDOf(frame []byte) uint32 {
	h, _ := wire.ParseRequestHeader(frame)
	return h.ReqID
}

// Acquire sends acquire and returns the response (do not use for an acquire
// that will queue: use Write with wire.AppendAcquire).
func (c *Conn) Acquire(key string, leaseMS, waitMS uint32) wire.Response {
	c.TB.Helper()
	return c.Do(wire.AppendAcquire(nil, c.NextID(), key, leaseMS, waitMS))
}

// MustAcquire acquires a free key and returns its token.
func (c *Conn) MustAcquire(key string, leaseMS uint32) uint64 {
	c.TB.Helper()
	r := c.Acquire(key, leaseMS, 0)
	if r.Status != wire.StatusGranted || r.Value == 0 {
		c.TB.Fatalf("servertest: acquire %q: %s, want G", key, Describe(r))
	}
	return r.Value
}

// Release sends release and returns the response.
func (c *Conn) Release(key string, token uint64) wire.Response {
	c.TB.Helper()
	return c.Do(wire.AppendRelease(nil, c.NextID(), key, token))
}

// Ping sends a ping and checks the pong.
func (c *Conn) Ping() wire.Response {
	c.TB.Helper()
	r := c.Do(wire.AppendPing(nil, c.NextID()))
	if r.Status != wire.StatusPong {
		c.TB.Fatalf("servertest: ping: %s, want P", Describe(r))
	}
	return r
}

// Query sends an admin query and returns the response.
func (c *Conn) Query(body string) wire.Response {
	c.TB.Helper()
	return c.Do(wire.AppendQuery(nil, c.NextID(), []byte(body)))
}

// Describe renders a response for failure messages.
func Describe(r wire.Response) string {
	s := fmt.Sprintf("%c(code %d %v, req_id %d, value %d, queued %d)", r.Status, r.Code, r.Code, r.ReqID, r.Value, r.Queued)
	if len(r.Payload) > 0 {
		p := r.Payload
		if len(p) > 200 {
			p = p[:200]
		}
		s += fmt.Sprintf(" payload %q", p)
	}
	return s
}

// Header builds a raw 16-byte request header (any op, flags, arg).
func Header(op byte, keyLen uint8, flags uint16, reqID uint32, arg uint64) []byte {
	return wire.AppendRequestHeader(nil, wire.Op(op), keyLen, flags, reqID, arg)
}

// AcquireArg packs lease_ms and wait_ms into an acquire's arg.
func AcquireArg(leaseMS, waitMS uint32) uint64 { return wire.AcquireArg(leaseMS, waitMS) }
