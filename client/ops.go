package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/ticketing/ticketing/client/wire"
)

// validKey checks a key as the server would (protocol.md §2.1 check 5)
// without copying it.
func validKey(key string) bool {
	return wire.ValidKey(unsafe.Slice(unsafe.StringData(key), len(key)))
}

// millis rounds d up to whole milliseconds; false when it does not fit a u32.
func millis(d time.Duration) (uint32, bool) {
	if d < 0 {
		return 0, false
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return 0, false
	}
	return uint32(ms), true
}

func checkLockArgs(key string, lease, wait time.Duration) (leaseMS, waitMS uint32, err error) {
	if !validKey(key) {
		return 0, 0, fmt.Errorf("%w: key must be 1..250 bytes of UTF-8 without control characters", ErrInvalidArgument)
	}
	leaseMS, ok := millis(lease)
	if !ok || leaseMS == 0 {
		return 0, 0, fmt.Errorf("%w: lease %v must be 1ms..%v", ErrInvalidArgument, lease, time.Duration(math.MaxUint32)*time.Millisecond)
	}
	waitMS, ok = millis(wait)
	if !ok {
		return 0, 0, fmt.Errorf("%w: wait %v must be 0..%v", ErrInvalidArgument, wait, time.Duration(math.MaxUint32)*time.Millisecond)
	}
	return leaseMS, waitMS, nil
}

// AcquireOption modifies one Acquire call.
type AcquireOption func(*acquireOpts)

type acquireOpts struct {
	minRemaining time.Duration
}

// MinRemaining is the minimum working time (edge rule R14): when less than
// d of the lease is left after the grant (Lock.Deadline minus now; a long
// queue or a slow answer ate it), Acquire releases the lock at once and
// fails with ErrInsufficientLease, so no caller starts work it cannot
// finish. d > lease always fails.
func MinRemaining(d time.Duration) AcquireOption {
	return func(o *acquireOpts) { o.minRemaining = d }
}

// Acquire waits up to wait for the lock on key and returns it with a lease
// of lease. Both are rounded up to whole milliseconds; lease must be at
// least 1 ms, wait 0 means try once (see TryAcquire). The server's
// max_lease and max_wait bound them (answered as a *ProtocolError).
//
// Errors (all wrapped in *OpError): ErrTimeout (not acquired within wait),
// ErrBusy with a *BusyError (refused at once, not queued; never retried),
// ErrIndeterminate (the request was written but no definite answer came:
// the lock may have been granted — do not enter the critical section),
// ctx's error (not acquired; a queued acquire is withdrawn and a grant that
// won the race is released in the background), ErrConnect (nothing could
// be sent), ErrNoLeader, *ProtocolError, ErrInvalidArgument, ErrClosed.
//
// The request is retried internally only when it was never written, or the
// answer was M (not the leader: not executed), and only within the
// remaining wait, which the retry carries. An acquire that finds every
// connection's max_inflight in use (WELCOME, protocol.md §3.3) waits for a
// free slot client-side, within wait; wait 0 acquires never need one.
//
// The wait bounds the whole call, connecting included (edge rule R1): with
// no connection up when it is used up, Acquire fails ErrConnect (nothing
// was tried). An acquire written and not answered within its remaining
// wait plus the answer allowance (WithAnswerAllowance, default 3 s) ends
// ErrIndeterminate and is withdrawn with a cancel (R2). See MinRemaining
// for the minimum working time (R14).
func (cl *Client) Acquire(ctx context.Context, key string, lease, wait time.Duration, opts ...AcquireOption) (*Lock, error) {
	leaseMS, waitMS, err := checkLockArgs(key, lease, wait)
	if err != nil {
		return nil, opErr("acquire", key, err)
	}
	var ao acquireOpts
	for _, o := range opts {
		o(&ao)
	}
	start := time.Now()
	budgetEnd := start.Add(time.Duration(waitMS) * time.Millisecond)
	var rd redirects
	for {
		if err := ctx.Err(); err != nil {
			return nil, opErr("acquire", key, err)
		}
		l, moved, addr, err := cl.acquireOnce(ctx, key, nil, leaseMS, waitMS, budgetEnd, budgetEnd)
		if err != nil {
			if addr == "" {
				addr = cl.addrs()
			}
			return nil, opErrAt("acquire", key, addr, err)
		}
		if l != nil {
			if ao.minRemaining > 0 {
				if rem := time.Until(l.deadline); rem < ao.minRemaining {
					cl.rel.submit(&relJob{st: relState{key: key, token: l.token, deadline: time.Now().Add(cl.cfg.releaseWindow)}})
					return nil, opErrAt("acquire", key, addr, fmt.Errorf("%w: %v of the lease left after the grant, below the minimum %v; released", ErrInsufficientLease, rem.Round(time.Millisecond), ao.minRemaining))
				}
			}
			return l, nil
		}
		if moved != nil {
			if err := rd.follow(ctx, cl, *moved, waitMS, budgetEnd); err != nil {
				return nil, opErrAt("acquire", key, addr, err)
			}
		}
		// Retry with the remaining wait (protocol.md §7: "within its remaining wait budget").
		if waitMS > 0 {
			rem := time.Until(budgetEnd)
			if rem < time.Millisecond {
				return nil, opErrAt("acquire", key, addr, ErrTimeout)
			}
			waitMS = uint32(rem / time.Millisecond)
		}
	}
}

// acquireOnce sends one acquire and waits for its answer: the lock, or the
// error to return, or (both nil) a retry: moved names the leader of an M
// answer; nil moved means the request was never written. addr is the
// server the request went to ("" when it was not sent). keys is nil for
// one key (A); for a key set (S, protocol.md §12.2) it is the set, and key
// its first key (the key a cancel names).
func (cl *Client) acquireOnce(ctx context.Context, key string, keys []string, leaseMS, waitMS uint32, connGiveUp, budgetEnd time.Time) (l *Lock, moved *string, addr string, err error) {
	c := getCall()
	c.op = wire.OpAcquire
	c.key = key
	if keys != nil {
		c.op, c.keys, c.need = wire.OpAcquireSet, keys, wire.FeatureKeySets
	}
	c.arg = wire.AcquireArg(leaseMS, waitMS)
	c.counts = waitMS > 0
	if err := cl.send(ctx, c, connGiveUp, budgetEnd); err != nil {
		putCall(c)
		if err == errNoSlot {
			err = ErrTimeout
		}
		return nil, nil, "", err
	}
	addr = c.cn.addr
	// R2: the answer is due within the wait the request carries plus the
	// allowance, counted from its write (c.sent: just before it was queued).
	due := time.Duration(wire.ArgWaitMS(c.arg))*time.Millisecond + cl.cfg.answerAllowance
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.cn.abandon(c) {
			return nil, nil, addr, ctx.Err()
		}
		<-c.done // answered meanwhile
		if c.fail == failNone && c.status == wire.StatusGranted {
			cl.compensateGrant(c)
		}
		putCall(c)
		return nil, nil, addr, ctx.Err()
	case <-c.after(time.Until(c.sent.Add(due))):
		if c.cn.abandon(c) { // withdrawn with C; a late grant is released by the reader
			return nil, nil, addr, fmt.Errorf("%w: no answer within %v of the request's write (its wait %v + the answer allowance %v); withdrawn",
				ErrIndeterminate, due, time.Duration(wire.ArgWaitMS(c.arg))*time.Millisecond, cl.cfg.answerAllowance)
		}
		<-c.done
	}
	defer putCall(c)
	if c.fail != failNone {
		if c.fail == failLost {
			if errors.Is(c.failErr, ErrClosed) {
				return nil, nil, addr, both(ErrIndeterminate, ErrClosed)
			}
			return nil, nil, addr, fmt.Errorf("%w: connection lost after the request was written: %w", ErrIndeterminate, c.failErr)
		}
		if cl.closed.Load() {
			return nil, nil, addr, ErrClosed
		}
		return nil, nil, addr, nil // never written: retry, on another connection if need be
	}
	switch c.status {
	case wire.StatusGranted:
		return &Lock{
			cl:       cl,
			key:      key,
			keys:     keys,
			token:    c.value,
			deadline: c.sent.Add(wire.QueuedDuration(c.queued) + time.Duration(leaseMS)*time.Millisecond),
		}, nil, addr, nil
	case wire.StatusTimeout:
		return nil, nil, addr, ErrTimeout
	case wire.StatusBusy:
		return nil, nil, addr, &BusyError{Code: c.code}
	case wire.StatusUnknown:
		return nil, nil, addr, fmt.Errorf("%w: the cluster could not confirm the commit", ErrIndeterminate)
	case wire.StatusError:
		return nil, nil, addr, &ProtocolError{Code: c.code, Msg: string(c.payload)}
	case wire.StatusMoved:
		m := string(c.payload)
		return nil, &m, addr, nil
	}
	return nil, nil, addr, nil // (no other status reaches a call)
}

// redirects counts an acquire's consecutive M answers.
type redirects struct {
	moves, rounds int
	woken         bool // sleepRedirect woke this call early once
}

// follow switches to the leader an M answer named; after maxMoves
// consecutive ones it backs off, within the budget, or gives up ErrNoLeader.
func (rd *redirects) follow(ctx context.Context, cl *Client, addr string, waitMS uint32, budgetEnd time.Time) error {
	cl.follow(addr)
	rd.moves++
	if rd.moves <= maxMoves {
		return nil
	}
	rd.rounds++
	d := cl.redirectDelay(rd.rounds)
	if waitMS == 0 || time.Until(budgetEnd) <= d {
		return noLeaderErr(rd.moves, addr)
	}
	if err := cl.sleepRedirect(ctx, d, cl.leader.Load(), &rd.woken); err != nil {
		return err
	}
	rd.moves = 0
	return nil
}

// noLeaderErr is ErrNoLeader after moves consecutive M answers, the last
// naming leader: said so an operator can act on it (no leader elected, or
// the named leader not reached).
func noLeaderErr(moves int, leader string) error {
	if leader == "" {
		return fmt.Errorf("%w elected (the nodes answered %d times in a row that they know none: an election is under way, or a majority of the nodes is down)", ErrNoLeader, moves)
	}
	return fmt.Errorf("%w: leader unreachable at %s (redirected there %d times in a row, it did not answer as the leader)", ErrNoLeader, leader, moves)
}

// TryAcquire is Acquire with wait 0: one attempt, answered at once; a held
// key gives ErrTimeout.
func (cl *Client) TryAcquire(ctx context.Context, key string, lease time.Duration) (*Lock, error) {
	return cl.Acquire(ctx, key, lease, 0)
}

// Ping measures the round trip to a server and returns its wall clock
// (protocol.md §3 P) and the round-trip time.
func (cl *Client) Ping(ctx context.Context) (serverTime time.Time, rtt time.Duration, err error) {
	giveUp := time.Now().Add(cl.cfg.dialTimeout)
	for {
		c := getCall()
		c.op = wire.OpPing
		if err := cl.send(ctx, c, giveUp, giveUp); err != nil {
			putCall(c)
			return time.Time{}, 0, opErr("ping", "", err)
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			if c.cn.abandon(c) {
				return time.Time{}, 0, opErr("ping", "", ctx.Err())
			}
			<-c.done
		}
		now := time.Now()
		fail, cause, st, code, value, sent, payload := c.fail, c.failErr, c.status, c.code, c.value, c.sent, c.payload
		putCall(c)
		switch {
		case fail != failNone:
			if cl.closed.Load() {
				return time.Time{}, 0, opErr("ping", "", ErrClosed)
			}
			if now.After(giveUp) {
				return time.Time{}, 0, opErr("ping", "", fmt.Errorf("%w: %w", ErrConnect, cause))
			}
			continue // a ping is harmless to repeat
		case st == wire.StatusPong:
			return time.UnixMicro(int64(value)), now.Sub(sent), nil
		default:
			return time.Time{}, 0, opErr("ping", "", &ProtocolError{Code: code, Msg: string(payload)})
		}
	}
}

// readOnlyAdmin are the admin commands that change nothing, safe to repeat.
var readOnlyAdmin = map[string]bool{wire.CmdStatus: true, wire.CmdLocks: true, wire.CmdTime: true, wire.CmdMembers: true}

// Admin runs the admin query cmd (protocol.md §8) with the members of args
// (a struct or map that encodes to a JSON object, or nil) and decodes the
// JSON reply into out (a pointer, or nil to discard it). The reply types
// are in client/wire (wire.StatusReply, wire.LocksReply, …). Most commands
// need role admin (WithAdminToken); an E answer is a *ProtocolError
// (NOT_PERMITTED, BAD_ADMIN …). M answers are followed like an acquire's.
// A read-only command whose connection is lost is repeated; a changing one
// reports ErrIndeterminate. A client of several addresses sends each query
// to the known leader, else to any connection that is up, so two queries
// may be answered by different nodes: for one node's view (status, then
// locks) use a client of that address alone (admin.Dial).
func (cl *Client) Admin(ctx context.Context, cmd string, args any, out any) error {
	body, err := adminBody(cmd, args)
	if err != nil {
		return opErr("admin", "", err)
	}
	giveUp := time.Now().Add(cl.cfg.dialTimeout)
	moves := 0
	for {
		c := getCall()
		c.op = wire.OpQuery
		c.body = body
		if err := cl.send(ctx, c, giveUp, giveUp); err != nil {
			putCall(c)
			return opErr("admin", "", err)
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			if c.cn.abandon(c) {
				return opErr("admin", "", ctx.Err())
			}
			<-c.done
		}
		fail, cause, st, code, payload := c.fail, c.failErr, c.status, c.code, c.payload
		putCall(c)
		switch {
		case fail == failLost && !readOnlyAdmin[cmd]:
			return opErr("admin", "", fmt.Errorf("%w: connection lost after the query was written: %w", ErrIndeterminate, cause))
		case fail != failNone:
			if cl.closed.Load() {
				return opErr("admin", "", ErrClosed)
			}
			if time.Now().After(giveUp) {
				return opErr("admin", "", fmt.Errorf("%w: %w", ErrConnect, cause))
			}
		case st == wire.StatusAdmin:
			if out == nil {
				return nil
			}
			if err := json.Unmarshal(payload, out); err != nil {
				return opErr("admin", "", fmt.Errorf("decoding the %s reply: %w", cmd, err))
			}
			return nil
		case st == wire.StatusMoved:
			cl.follow(string(payload))
			moves++
			if moves > maxMoves {
				return opErr("admin", "", noLeaderErr(moves, string(payload)))
			}
		default:
			return opErr("admin", "", &ProtocolError{Code: code, Msg: string(payload)})
		}
	}
}

// adminBody builds {…args, "cmd": cmd}. cmd comes last so that it wins
// over a "cmd" member of args.
func adminBody(cmd string, args any) ([]byte, error) {
	if cmd == "" {
		return nil, fmt.Errorf("%w: empty admin command", ErrInvalidArgument)
	}
	cmdJSON, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	var inner []byte
	if args != nil {
		a, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("%w: admin arguments: %v", ErrInvalidArgument, err)
		}
		a = bytes.TrimSpace(a)
		if bytes.Equal(a, []byte("null")) {
			a = []byte("{}")
		}
		if len(a) < 2 || a[0] != '{' {
			return nil, fmt.Errorf("%w: admin arguments must encode to a JSON object", ErrInvalidArgument)
		}
		inner = bytes.TrimSpace(a[1 : len(a)-1])
	}
	body := make([]byte, 0, len(inner)+len(cmdJSON)+10)
	body = append(body, '{')
	if len(inner) > 0 {
		body = append(body, inner...)
		body = append(body, ',')
	}
	body = append(body, `"cmd":`...)
	body = append(body, cmdJSON...)
	body = append(body, '}')
	if len(body) > wire.MaxAdminBody {
		return nil, fmt.Errorf("%w: admin query of %d bytes exceeds %d", ErrInvalidArgument, len(body), wire.MaxAdminBody)
	}
	return body, nil
}
