package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// ErrRejected is returned when the server answers AUTH with REJECT
// (wire.ErrRejected).
var ErrRejected = wire.ErrRejected

// dial opens a connection and runs the protocol.md §1 handshake as role with
// token (wire.ClientHandshake: the server's proof is checked when a token is
// given).
func dial(ctx context.Context, addr string, role wire.Role, token string, timeout time.Duration) (net.Conn, uint32, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	_ = nc.SetDeadline(time.Now().Add(timeout))
	_, w, err := wire.ClientHandshake(nc, role, []byte(token))
	if err != nil {
		nc.Close()
		return nil, 0, fmt.Errorf("bench: handshake with %s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, w.MaxInflight, nil
}

// ErrNoKeySets is returned when a set size above 1 is asked of a server
// whose feature pong does not announce KEY_SETS (protocol.md §12.1).
var ErrNoKeySets = errors.New("bench: the server does not support key sets (protocol 1.1 KEY_SETS); use --set-size 1")

// dialLoad opens a load connection to addr; with a set size above 1 or a
// connection label it also asks for the server's features (a ping with arg
// 1, protocol.md §12.1) and fails with ErrNoKeySets unless the pong
// announces KEY_SETS (for sets), so no S or X is ever sent before that pong
// was read; with a label it sends L (§12.3) and reads its O.
func dialLoad(ctx context.Context, cfg *Config, addr string) (net.Conn, uint32, error) {
	nc, maxInflight, err := dial(ctx, addr, cfg.Role, cfg.Token, cfg.DialTimeout)
	if err != nil || cfg.SetSize <= 1 && cfg.ConnLabel == "" {
		return nc, maxInflight, err
	}
	_ = nc.SetDeadline(time.Now().Add(cfg.DialTimeout))
	f, err := askFeatures(nc)
	switch {
	case err != nil:
	case cfg.SetSize > 1 && !f.Has(wire.FeatureKeySets):
		err = ErrNoKeySets
	case cfg.ConnLabel != "" && !f.Has(wire.FeatureLabels):
		err = fmt.Errorf("bench: the server does not accept connection labels (protocol 1.0)")
	case cfg.ConnLabel != "":
		err = sendLabel(nc, cfg.ConnLabel)
	}
	_ = nc.SetDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, 0, err
	}
	return nc, maxInflight, nil
}

// askFeatures sends the feature ping and reads its pong (the first response
// on a connection that has sent nothing else, §12.1).
func askFeatures(nc net.Conn) (wire.Features, error) {
	const reqID = 1
	resp, err := roundTrip(nc, wire.AppendPingFeatures(nil, reqID))
	if err != nil {
		return 0, err
	}
	if resp.Status != wire.StatusPong || resp.ReqID != reqID {
		return 0, fmt.Errorf("bench: feature ping answered %c %s", resp.Status, resp.Code)
	}
	return resp.Features(), nil
}

// sendLabel sends L and reads its O (§12.3).
func sendLabel(nc net.Conn, label string) error {
	const reqID = 2
	resp, err := roundTrip(nc, wire.AppendLabel(nil, reqID, label))
	if err == nil && (resp.Status != wire.StatusReleased || resp.ReqID != reqID) {
		err = fmt.Errorf("bench: label answered %c %s", resp.Status, resp.Code)
	}
	return err
}

// roundTrip writes one request and reads the first response.
func roundTrip(nc net.Conn, frame []byte) (wire.Response, error) {
	if _, err := nc.Write(frame); err != nil {
		return wire.Response{}, err
	}
	var buf []byte
	tmp := make([]byte, 512)
	for {
		n, err := nc.Read(tmp)
		buf = append(buf, tmp[:n]...)
		resp, used, perr := wire.ParseResponse(buf)
		if perr != nil {
			return wire.Response{}, perr
		}
		if used > 0 {
			return resp, nil
		}
		if err != nil {
			return wire.Response{}, err
		}
	}
}

// queryStatus asks the server for admin `status` on a fresh connection.
func queryStatus(ctx context.Context, cfg *Config) (*wire.StatusReply, error) {
	nc, _, err := dial(ctx, cfg.Addr, wire.RoleAdmin, cfg.AdminToken, cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(cfg.DialTimeout))
	if _, err := nc.Write(wire.AppendQuery(nil, 1, []byte(`{"cmd":"status"}`))); err != nil {
		return nil, err
	}
	var buf []byte
	tmp := make([]byte, 4096)
	for {
		n, err := nc.Read(tmp)
		buf = append(buf, tmp[:n]...)
		resp, used, perr := wire.ParseResponse(buf)
		if perr != nil {
			return nil, perr
		}
		if used > 0 {
			if resp.Status != wire.StatusAdmin {
				return nil, fmt.Errorf("bench: status query answered %c %s", resp.Status, resp.Code)
			}
			var st wire.StatusReply
			if err := json.Unmarshal(resp.Payload, &st); err != nil {
				return nil, err
			}
			return &st, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// holdKeys acquires keys [from, to) with lease on one pipelined connection
// and returns their tokens (0 where not granted) and the number granted.
func holdKeys(ctx context.Context, cfg *Config, from, to int, lease time.Duration) ([]uint64, int, error) {
	nc, _, err := dial(ctx, cfg.Addr, cfg.Role, cfg.Token, cfg.DialTimeout)
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	tokens := make([]uint64, to-from)
	granted := 0
	err = window(nc, to-from, func(b []byte, i int) []byte {
		var k [KeyLen]byte
		putKey(&k, uint64(from+i))
		return appendReq(b, wire.OpAcquire, uint32(i), &k, wire.AcquireArg(uint32(lease.Milliseconds()), 0))
	}, func(r *wire.Response) {
		if r.Status == wire.StatusGranted && int(r.ReqID) < len(tokens) {
			tokens[r.ReqID] = r.Value
			granted++
		}
	})
	return tokens, granted, err
}

// releaseKeys releases every key [from, from+len(tokens)) whose token is not 0.
func releaseKeys(ctx context.Context, cfg *Config, from int, tokens []uint64) error {
	nc, _, err := dial(ctx, cfg.Addr, cfg.Role, cfg.Token, cfg.DialTimeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	idx := make([]int, 0, len(tokens))
	for i, t := range tokens {
		if t != 0 {
			idx = append(idx, i)
		}
	}
	return window(nc, len(idx), func(b []byte, j int) []byte {
		var k [KeyLen]byte
		i := idx[j]
		putKey(&k, uint64(from+i))
		return appendReq(b, wire.OpRelease, uint32(j), &k, tokens[i])
	}, func(*wire.Response) {})
}

// releaseStranded releases held (key, token) pairs on addr, and fails
// unless each was answered O or N.
func releaseStranded(ctx context.Context, cfg *Config, addr string, held []stranded) error {
	nc, _, err := dialLoad(ctx, cfg, addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(cfg.DialTimeout))
	var bad error
	err = window(nc, len(held), func(b []byte, i int) []byte {
		return appendRelease(b, cfg.SetSize, span(cfg, uint64(cfg.slotsTotal())), uint32(i), &held[i].key, held[i].token)
	}, func(r *wire.Response) {
		if r.Status != wire.StatusReleased && r.Status != wire.StatusNotHolder && bad == nil {
			bad = fmt.Errorf("bench: release on %s answered %c", addr, r.Status)
		}
	})
	if err != nil {
		return err
	}
	return bad
}

// window sends n requests built by enc with at most 4096 in flight and hands
// every response to dec.
func window(nc net.Conn, n int, enc func(b []byte, i int) []byte, dec func(*wire.Response)) error {
	const inflight = 4096
	sent, got := 0, 0
	wbuf := make([]byte, 0, 64<<10)
	rbuf := make([]byte, 64<<10)
	r := 0
	for got < n {
		wbuf = wbuf[:0]
		for sent < n && sent-got < inflight && len(wbuf) < 48<<10 {
			wbuf = enc(wbuf, sent)
			sent++
		}
		if len(wbuf) > 0 {
			if _, err := nc.Write(wbuf); err != nil {
				return err
			}
		}
		m, err := nc.Read(rbuf[r:])
		r += m
		off := 0
		for {
			resp, used, perr := wire.ParseResponse(rbuf[off:r])
			if perr != nil {
				return perr
			}
			if used == 0 {
				break
			}
			dec(&resp)
			off += used
			got++
		}
		r = copy(rbuf, rbuf[off:r])
		if err != nil && got < n {
			return err
		}
	}
	return nil
}
