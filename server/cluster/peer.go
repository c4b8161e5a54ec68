package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ticketing/ticketing/client/wire"
)

// ErrPeerAuth is returned when a peer rejects our handshake or fails to prove
// the peer token.
var ErrPeerAuth = errors.New("cluster: peer authentication failed")

// RaftStreamByte reports whether b can start a hashicorp/raft RPC stream
// (its rpc type bytes are small integers) rather than a protocol request
// (ops are ASCII letters). The peer port uses it to tell the two apart after
// the role-3 handshake.
func RaftStreamByte(b byte) bool { return b < 0x20 }

// DialPeer connects to a peer port, runs TLS (when tlsCfg is set) and the
// protocol.md §1 handshake with role 3 and the peer token, verifies the
// peer's proof, and returns the connection ready for raft or for P/Q requests.
func DialPeer(ctx context.Context, addr string, token string, tlsCfg *tls.Config) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	} else {
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	}
	if tlsCfg != nil {
		if tlsCfg.ServerName == "" {
			// Verify the peer's certificate for the host it is dialed at
			// (crypto/tls refuses an empty ServerName).
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				nc.Close()
				return nil, err
			}
			tlsCfg = tlsCfg.Clone()
			tlsCfg.ServerName = host
		}
		tc := tls.Client(nc, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		nc = tc
	}
	_, w, err := wire.ClientHandshake(nc, wire.RolePeer, []byte(token))
	switch {
	case errors.Is(err, wire.ErrRejected):
		nc.Close()
		return nil, fmt.Errorf("%w: rejected (%s)", ErrPeerAuth, w.Code)
	case errors.Is(err, wire.ErrServerProof):
		nc.Close()
		return nil, fmt.Errorf("%w: the peer did not prove the token", ErrPeerAuth)
	case err != nil:
		nc.Close()
		if errors.Is(err, wire.ErrBadMagic) || errors.Is(err, wire.ErrBadVersion) || errors.Is(err, wire.ErrBadReserved) || errors.Is(err, wire.ErrBadStatus) {
			return nil, fmt.Errorf("%w: %v", ErrPeerAuth, err)
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}

// PeekedConn is a connection whose first bytes were read into a buffer.
type PeekedConn struct {
	net.Conn
	R *bufio.Reader
}

func (p *PeekedConn) Read(b []byte) (int, error) { return p.R.Read(b) }

// StreamLayer is the raft transport's stream layer: outbound streams are
// dialed with DialPeer; inbound ones are handed over by the server's peer
// port (HandOff) after it ran the handshake and saw a raft first byte.
type StreamLayer struct {
	addr     net.Addr
	token    string
	tlsCfg   *tls.Config
	incoming chan net.Conn
	once     sync.Once
	closed   chan struct{}
}

// NewStreamLayer returns a stream layer advertising addr (the peer address
// other nodes dial).
func NewStreamLayer(addr net.Addr, token string, tlsCfg *tls.Config) *StreamLayer {
	return &StreamLayer{addr: addr, token: token, tlsCfg: tlsCfg, incoming: make(chan net.Conn), closed: make(chan struct{})}
}

// HandOff gives an authenticated inbound raft stream to raft; it closes the
// connection when the layer is closed.
func (s *StreamLayer) HandOff(c net.Conn) {
	select {
	case s.incoming <- c:
	case <-s.closed:
		c.Close()
	}
}

// Accept implements net.Listener.
func (s *StreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.incoming:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (s *StreamLayer) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// Addr implements net.Listener.
func (s *StreamLayer) Addr() net.Addr { return s.addr }

// Dial implements raft.StreamLayer.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return DialPeer(ctx, string(address), s.token, s.tlsCfg)
}

var _ raft.StreamLayer = (*StreamLayer)(nil)
