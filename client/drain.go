package client

import (
	"context"
	"time"
)

// Drain waits until the client has no background work left: no abandoned
// request still awaiting its answer (an acquire withdrawn because its ctx
// ended, and its cancel), and no release queued or retried in the
// background (compensations of grants that won the race against a cancel,
// and releases whose caller stopped waiting). It returns ctx's error when
// ctx ends first.
//
// A short-lived process (a CLI interrupted while it waits for a lock) calls
// Drain before Close, so that its withdrawn acquire does not stay queued and
// a grant that won the race is released instead of holding the key until its
// lease ends. Background releases give up 5 s after they were requested, so
// Drain returns within about that long even when the server is unreachable.
func (cl *Client) Drain(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		if cl.abandoned.Load() == 0 {
			cl.rel.mu.Lock()
			n := cl.rel.count
			cl.rel.mu.Unlock()
			// Compensations are queued before the abandoned count drops
			// (complete), so a zero count here and an empty queue mean idle.
			if n == 0 && cl.abandoned.Load() == 0 {
				return nil
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-cl.closing:
			return ErrClosed
		}
	}
}
