package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Atomic key sets (protocol.md §12.2): 2–16 distinct keys acquired by one
// request, with one lease, one wait and one fencing token for the whole set,
// and released whole. The deadlock-free way to lock several resources: the
// server queues a set on every one of its keys at one instant, so no lock
// ordering is needed. A set is a *Lock like a single key: Keys lists the
// set, Token fences every key of it, Release releases the whole set.
//
// Key sets need a 1.1 server: against a 1.0 server AcquireSet and
// ReleaseSet fail at once with ErrUnsupported, sending nothing.

// Keys are the keys of the lock: the set, in the order given to AcquireSet,
// or the one key.
func (l *Lock) Keys() []string {
	if l.keys != nil {
		return append([]string(nil), l.keys...)
	}
	return []string{l.key}
}

// checkSet validates a key set as the server would (§12.2 steps 5–7).
func checkSet(keys []string) error {
	if len(keys) < wire.MinSetKeys || len(keys) > wire.MaxSetKeys {
		return fmt.Errorf("%w: a key set has %d to %d keys, not %d", ErrInvalidArgument, wire.MinSetKeys, wire.MaxSetKeys, len(keys))
	}
	for i, k := range keys {
		if !validKey(k) {
			return fmt.Errorf("%w: key %q must be 1..250 bytes of UTF-8 without control characters", ErrInvalidArgument, k)
		}
		for _, o := range keys[:i] {
			if o == k {
				return fmt.Errorf("%w: duplicate key %q in set", ErrInvalidArgument, k)
			}
		}
	}
	return nil
}

func setName(keys []string) string { return strings.Join(keys, ",") }

// AcquireSet acquires every key of keys (2–16 distinct keys) at once, as
// Acquire does one key: one lease and one fencing token for the whole set,
// waiting up to wait (0: try once) until every key is free. The set waits
// in each key's FIFO queue from one instant on, so sets never deadlock
// however they overlap. Errors as Acquire's, and ErrUnsupported from a 1.0
// server. Lock.Release (or ReleaseSet) releases the whole set.
func (cl *Client) AcquireSet(ctx context.Context, keys []string, lease, wait time.Duration) (*Lock, error) {
	name := setName(keys)
	if err := checkSet(keys); err != nil {
		return nil, opErr("acquire", name, err)
	}
	leaseMS, waitMS, err := checkLockArgs(keys[0], lease, wait)
	if err != nil {
		return nil, opErr("acquire", name, err)
	}
	keys = append([]string(nil), keys...)
	start := time.Now()
	budgetEnd := start.Add(time.Duration(waitMS) * time.Millisecond)
	connGiveUp := start.Add(cl.cfg.dialTimeout)
	if budgetEnd.After(connGiveUp) {
		connGiveUp = budgetEnd
	}
	var rd redirects
	for {
		if err := ctx.Err(); err != nil {
			return nil, opErr("acquire", name, err)
		}
		l, moved, _, err := cl.acquireOnce(ctx, keys[0], keys, leaseMS, waitMS, connGiveUp, budgetEnd)
		if err != nil {
			return nil, opErr("acquire", name, err)
		}
		if l != nil {
			return l, nil
		}
		if moved != nil {
			if err := rd.follow(ctx, cl, *moved, waitMS, budgetEnd); err != nil {
				return nil, opErr("acquire", name, err)
			}
		}
		if waitMS > 0 {
			rem := time.Until(budgetEnd)
			if rem < time.Millisecond {
				return nil, opErr("acquire", name, ErrTimeout)
			}
			waitMS = uint32(rem / time.Millisecond)
		}
	}
}

// TryAcquireSet is AcquireSet with wait 0: every key free now, or ErrTimeout.
func (cl *Client) TryAcquireSet(ctx context.Context, keys []string, lease time.Duration) (*Lock, error) {
	return cl.AcquireSet(ctx, keys, lease, 0)
}

// ReleaseSet releases the key set held with token (X, §12.2): keys must be
// exactly the set's keys, in any order. Answers as Release: nil only on O;
// ErrNotHolder when the token does not hold exactly these keys (a wrong or
// missing key, or the lease ended); ErrIndeterminate; ErrUnsupported from a
// 1.0 server. A single key of a set cannot be released alone.
func (cl *Client) ReleaseSet(ctx context.Context, keys []string, token uint64) error {
	name := setName(keys)
	if err := checkSet(keys); err != nil {
		return opErr("release", name, err)
	}
	_, err := cl.releaseWith(ctx, relState{key: name, keys: append([]string(nil), keys...), token: token,
		deadline: time.Now().Add(cl.cfg.releaseWindow)})
	return err
}

// compensateGrant releases, in the background, what a granted acquire call
// (A or S) holds: its caller had already given up.
func (cl *Client) compensateGrant(c *call) {
	if c.op == wire.OpAcquireSet {
		cl.compensateSet(c.keys, c.value)
		return
	}
	cl.compensate(c.key, c.value)
}

// compensateSet releases, in the background, a key set granted to an
// acquire whose caller had already given up.
func (cl *Client) compensateSet(keys []string, token uint64) {
	cl.stats.compensations.Add(1)
	j := &relJob{compensation: true, st: relState{key: setName(keys), keys: keys, token: token, deadline: time.Now().Add(cl.cfg.releaseWindow)}}
	if !cl.rel.submit(j) {
		cl.log.Warn("ticketing: release queue full; an abandoned grant stays held until its lease ends", "keys", setName(keys), "token", token)
	}
}
