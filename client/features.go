package client

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/ticketing/ticketing/client/wire"
)

// Protocol 1.1 on a connection (protocol.md §12.1, §12.4): right after the
// handshake the client asks for the server's feature bits with a ping (arg
// 1), then, when the server announces LABELS, sends the connection's label.
// A call that needs a feature the connection's server does not announce
// fails at once with ErrUnsupported, without sending anything.

var (
	// ErrUnsupported: the call needs a protocol 1.1 feature (key sets) that
	// the server of the connection does not announce (a 1.0 server).
	// Nothing was sent.
	ErrUnsupported = errors.New("ticketing: not supported by this server")
)

// negotiate asks the server of a freshly handshaken connection for its
// feature bits and sends the label when it takes one. It runs before the
// connection serves calls (nothing else is outstanding), within the dial
// timeout.
func (cn *conn) negotiate(nc net.Conn) (wire.Features, error) {
	var b [wire.HeaderLen + wire.MaxLabelLen]byte
	if _, err := nc.Write(wire.AppendPingFeatures(b[:0], 1)); err != nil {
		return 0, err
	}
	resp, err := readResponse(nc, b[:])
	if err != nil {
		return 0, err
	}
	if resp.Status != wire.StatusPong || resp.ReqID != 1 {
		return 0, fmt.Errorf("%w: the feature ping was answered %q", errProtocol, rune(resp.Status))
	}
	f := resp.Features()
	label := cn.cl.cfg.connLabel()
	if !f.Has(wire.FeatureLabels) || label == "" {
		return f, nil
	}
	if _, err := nc.Write(wire.AppendLabel(b[:0], 2, label)); err != nil {
		return 0, err
	}
	if resp, err = readResponse(nc, b[:]); err != nil {
		return 0, err
	}
	if resp.Status != wire.StatusReleased || resp.ReqID != 2 {
		// informational only (§12.3): keep the connection, without a label
		cn.cl.log.Warn("ticketing: the server refused the connection label", "addr", cn.addr, "label", label, "code", resp.Code.String())
	}
	return f, nil
}

// readResponse reads one response (and a payload of up to len(buf)-16 bytes,
// discarding the rest) from r.
func readResponse(r io.Reader, buf []byte) (wire.Response, error) {
	if _, err := io.ReadFull(r, buf[:wire.HeaderLen]); err != nil {
		return wire.Response{}, err
	}
	n, err := wire.ResponseFrameLen(buf[:wire.HeaderLen])
	if err != nil {
		return wire.Response{}, fmt.Errorf("%w: %w", errProtocol, err)
	}
	if n > wire.HeaderLen {
		if _, err := io.CopyN(io.Discard, r, int64(n-wire.HeaderLen)); err != nil {
			return wire.Response{}, err
		}
	}
	h := buf[:wire.HeaderLen]
	return wire.Response{Status: wire.Status(h[0]), Code: wire.Code(h[1]), Queued: binary.BigEndian.Uint16(h[2:4]),
		ReqID: binary.BigEndian.Uint32(h[4:8]), Value: binary.BigEndian.Uint64(h[8:16])}, nil
}

// Features returns the protocol 1.1 feature bits announced by the server of
// one of the client's live connections (the leader's when known), and
// whether any connection is up. Features are per connection: after a
// reconnect they are asked again.
func (cl *Client) Features() (wire.Features, bool) {
	conns := cl.pool.Load().conns
	if ep := cl.leader.Load(); ep != nil {
		conns = append(ep.conns[:len(ep.conns):len(ep.conns)], conns...)
	}
	for _, cn := range conns {
		cn.mu.Lock()
		up, f := cn.state == stateUp, cn.features
		cn.mu.Unlock()
		if up {
			return f, true
		}
	}
	return 0, false
}
