package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Raw is a protocol connection (role admin without a token, or any role
// and token with DialRawAuth) to one node, for the tests' own probes:
// admin queries to that very node (status, locks, members, add-node …) and
// single lock requests whose every answer (M, U, B …) the test wants to
// see, unlike the Go client that follows M. It is
// safe for concurrent use; requests are answered in order of req_id
// matching. Every call has a deadline.
type Raw struct {
	Addr string
	mu   sync.Mutex
	nc   net.Conn
	id   uint32
	buf  []byte
}

// DialRaw connects to addr with role admin and the empty token.
func DialRaw(ctx context.Context, addr string) (*Raw, error) {
	return DialRawAuth(ctx, addr, wire.RoleAdmin, "")
}

// DialRawAuth connects to addr with role and token (a cluster whose nodes
// have tokens, e.g. the compose cluster of the container tests).
func DialRawAuth(ctx context.Context, addr string, role wire.Role, token string) (*Raw, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(5 * time.Second)
	}
	_ = nc.SetDeadline(dl)
	if _, _, err := wire.ClientHandshake(nc, role, []byte(token)); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return &Raw{Addr: addr, nc: nc}, nil
}

// Close closes the connection.
func (r *Raw) Close() error { return r.nc.Close() }

// Do sends one request built by frame and waits (up to d) for its answer.
// Answers to earlier requests that were abandoned are skipped.
func (r *Raw) Do(d time.Duration, frame func(b []byte, id uint32) []byte) (wire.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id++
	id := r.id
	_ = r.nc.SetDeadline(time.Now().Add(d))
	if _, err := r.nc.Write(frame(nil, id)); err != nil {
		return wire.Response{}, err
	}
	var tmp [4096]byte
	for {
		resp, n, err := wire.ParseResponse(r.buf)
		if err != nil {
			return wire.Response{}, err
		}
		if n > 0 {
			resp.Payload = append([]byte(nil), resp.Payload...)
			r.buf = append(r.buf[:0], r.buf[n:]...)
			if resp.ReqID != id {
				continue
			}
			return resp, nil
		}
		m, err := r.nc.Read(tmp[:])
		if err != nil {
			return wire.Response{}, err
		}
		r.buf = append(r.buf, tmp[:m]...)
	}
}

// Acquire sends one acquire and returns the node's answer as is.
func (r *Raw) Acquire(key string, lease, wait time.Duration) (wire.Response, error) {
	return r.Do(wait+10*time.Second, func(b []byte, id uint32) []byte {
		return wire.AppendAcquire(b, id, key, uint32(lease/time.Millisecond), uint32(wait/time.Millisecond))
	})
}

// Release sends one release and returns the node's answer as is.
func (r *Raw) Release(key string, token uint64) (wire.Response, error) {
	return r.Do(10*time.Second, func(b []byte, id uint32) []byte { return wire.AppendRelease(b, id, key, token) })
}

// Query runs the admin command cmd with args (a struct or map, or nil) on
// this node and decodes a J answer into out. An M answer is returned as
// *MovedError, an E answer as *AdminError.
func (r *Raw) Query(cmd string, args map[string]any, out any) error {
	return r.queryWithin(70*time.Second, cmd, args, out)
}

// MovedError is an M answer to an admin query.
type MovedError struct{ Leader string }

func (e *MovedError) Error() string { return fmt.Sprintf("moved to %q", e.Leader) }

// AdminError is any other non-J answer.
type AdminError struct {
	Status wire.Status
	Code   wire.Code
	Msg    string
}

func (e *AdminError) Error() string { return fmt.Sprintf("%c %s: %s", e.Status, e.Code, e.Msg) }

// Status queries `status` on the node at addr with a fresh connection.
func Status(ctx context.Context, addr string) (wire.StatusReply, error) {
	var st wire.StatusReply
	err := QueryOnce(ctx, addr, wire.CmdStatus, nil, &st)
	return st, err
}

// QueryOnce runs one admin query on a fresh connection to addr.
func QueryOnce(ctx context.Context, addr, cmd string, args map[string]any, out any) error {
	return QueryOnceAuth(ctx, addr, "", cmd, args, out)
}

// QueryOnceAuth is QueryOnce with an admin token.
func QueryOnceAuth(ctx context.Context, addr, adminToken, cmd string, args map[string]any, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
	}
	r, err := DialRawAuth(ctx, addr, wire.RoleAdmin, adminToken)
	if err != nil {
		return err
	}
	defer r.Close()
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if cmd == wire.CmdAddNode || cmd == wire.CmdRemoveNode || cmd == wire.CmdTransferLeader {
			d = 70 * time.Second
		}
		return r.queryWithin(d, cmd, args, out)
	}
	return r.Query(cmd, args, out)
}

func (r *Raw) queryWithin(d time.Duration, cmd string, args map[string]any, out any) error {
	body := map[string]any{}
	for k, v := range args {
		body[k] = v
	}
	body["cmd"] = cmd
	b, _ := json.Marshal(body)
	resp, err := r.Do(d, func(buf []byte, id uint32) []byte { return wire.AppendQuery(buf, id, b) })
	if err != nil {
		return err
	}
	switch resp.Status {
	case wire.StatusAdmin:
		if out == nil {
			return nil
		}
		return json.Unmarshal(resp.Payload, out)
	case wire.StatusMoved:
		return &MovedError{Leader: string(resp.Payload)}
	default:
		return &AdminError{Status: resp.Status, Code: resp.Code, Msg: string(resp.Payload)}
	}
}
