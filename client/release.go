package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

// Releases.
//
// A release is authorized by its token alone and is safe to repeat: a
// repeated release after the first one worked gets N and changes nothing.
// So a release is retried until it gets a definite answer (O, N, E) or
// until 5 s after it was requested, never longer — past that the lease is
// the safety net. Client.Release makes its attempts in the caller's
// goroutine; compensations (grants that won the race against a cancel), and
// releases whose caller stopped waiting, are retried by one background
// goroutine (the releaser) that holds them in a bounded queue and pipelines
// their attempts over the shared connections.

// relState interprets the answers to one release's attempts.
type relState struct {
	key      string
	keys     []string // a key set (X, protocol.md §12.2); nil for one key
	token    uint64
	deadline time.Time
	maybe    bool // an earlier attempt may have been executed
	moves    int  // consecutive M answers
	retries  int
	woken    bool // a new leader cut a back-off short once (sleepRedirect)
}

// outcome interprets one attempt; final reports a definite answer (err nil
// for O), otherwise retry after wait.
func (s *relState) outcome(cl *Client, c *call) (final bool, wait time.Duration, err error) {
	if c.fail != failNone {
		if errors.Is(c.failErr, ErrClosed) || cl.closed.Load() {
			return true, 0, both(ErrIndeterminate, ErrClosed)
		}
		if c.fail == failUnsent {
			return false, 0, nil
		}
		s.maybe = true
		s.retries++
		return false, s.backoff(cl), nil
	}
	switch c.status {
	case wire.StatusReleased:
		return true, 0, nil
	case wire.StatusNotHolder:
		if s.maybe {
			return true, 0, fmt.Errorf("%w: the token no longer holds the key; an earlier unconfirmed attempt may have released it", ErrIndeterminate)
		}
		return true, 0, ErrNotHolder
	case wire.StatusMoved:
		cl.follow(string(c.payload))
		s.moves++
		if s.moves > maxMoves {
			s.moves = 0
			s.retries++
			return false, s.backoff(cl), nil
		}
		return false, 0, nil
	case wire.StatusUnknown:
		s.maybe = true
		s.retries++
		return false, s.backoff(cl), nil
	default: // E
		return true, 0, &ProtocolError{Code: c.code, Msg: string(c.payload)}
	}
}

// backoff is the pause before the next try, on the redirect schedule (25 ms
// doubling to 200 ms, jittered): a retry after a lost connection or U goes
// to another node or waits for a new leader, and a release delayed by a
// failover keeps the key held for nobody.
func (s *relState) backoff(cl *Client) time.Duration {
	return cl.redirectDelay(s.retries)
}

func (s *relState) giveUp(cause error) error {
	if cause == nil {
		return fmt.Errorf("%w: release not confirmed within %v", ErrIndeterminate, releaseWindow)
	}
	return fmt.Errorf("%w: release not confirmed within %v: %w", ErrIndeterminate, releaseWindow, cause)
}

// Release releases the lock on key held with token — from any process that
// knows the token (protocol.md §5). It returns nil only when the server
// answered O. ErrNotHolder: the key is free or held under another token
// (the lease had ended). ErrIndeterminate: no confirmation within 5 s of
// the call (or ctx ended first, or the client closed); attempts that may
// have reached the server are repeated meanwhile, and when ctx ends first
// they go on in the background until those 5 s are up.
func (cl *Client) Release(ctx context.Context, key string, token uint64) error {
	_, err := cl.release(ctx, key, token)
	return err
}

// release is Release; sent reports whether any attempt was written.
func (cl *Client) release(ctx context.Context, key string, token uint64) (sent bool, _ error) {
	if !validKey(key) {
		return false, opErr("release", key, fmt.Errorf("%w: key must be 1..250 bytes of UTF-8 without control characters", ErrInvalidArgument))
	}
	if token == 0 {
		return false, opErr("release", key, fmt.Errorf("%w: token must be 1..2^64-1 (0 is never granted)", ErrInvalidArgument))
	}
	if cl.closed.Load() {
		return false, opErrAt("release", key, cl.addrs(), ErrClosed) // nothing was sent (R7)
	}
	return cl.releaseWith(ctx, relState{key: key, token: token, deadline: time.Now().Add(cl.cfg.releaseWindow)})
}

// fill makes c the release attempt of s: R, or X for a key set.
func (s *relState) fill(c *call) {
	c.op = wire.OpRelease
	c.key = s.key
	c.arg = s.token
	if s.keys != nil {
		c.op = wire.OpReleaseSet
		c.keys = s.keys
		c.need = wire.FeatureKeySets
	}
}

// releaseWith makes the attempts of s (Release, ReleaseSet); sent reports
// whether any attempt was written.
func (cl *Client) releaseWith(ctx context.Context, s relState) (sent bool, _ error) {
	key := s.key
	var cause error
	addr := ""
	fail := func(err error) (bool, error) {
		if addr == "" {
			addr = cl.addrs()
		}
		return sent, opErrAt("release", key, addr, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			cl.rel.submit(&relJob{st: s})
			return fail(both(ErrIndeterminate, err))
		}
		if time.Until(s.deadline) <= 0 {
			return fail(s.giveUp(cause))
		}
		c := getCall()
		s.fill(c)
		if err := cl.send(ctx, c, s.deadline, s.deadline); err != nil {
			putCall(c)
			switch {
			case errors.Is(err, ErrUnsupported): // nothing sent: a 1.0 server holds no key set
				return fail(err)
			case errors.Is(err, ErrClosed):
				if !sent {
					return fail(ErrClosed)
				}
				return fail(both(ErrIndeterminate, ErrClosed))
			case ctx.Err() != nil:
				cl.rel.submit(&relJob{st: s})
				return fail(both(ErrIndeterminate, err))
			}
			return fail(s.giveUp(err))
		}
		sent = true
		addr = c.cn.addr
		select {
		case <-c.done:
		case <-ctx.Done():
			if cl.rel.adopt(c, &relJob{st: s}) {
				return fail(both(ErrIndeterminate, ctx.Err()))
			}
			<-c.done // answered meanwhile
		case <-c.after(time.Until(s.deadline)):
			// The window is over and this attempt is unanswered: never wait longer.
			if c.cn.drop(c) {
				return fail(s.giveUp(cause))
			}
			<-c.done
		}
		if c.fail != failNone {
			cause = c.failErr
		}
		final, wait, err := s.outcome(cl, c)
		putCall(c)
		if final {
			if err != nil {
				return fail(err)
			}
			return true, nil
		}
		known := cl.leader.Load()
		// Retry; the last try happens shortly before the window ends, and
		// at once when the client learns a new leader meanwhile.
		if err := cl.sleepRedirect(ctx, min(wait, time.Until(s.deadline)-10*time.Millisecond), known, &s.woken); err != nil {
			if errors.Is(err, ErrClosed) {
				return fail(both(ErrIndeterminate, ErrClosed))
			}
			cl.rel.submit(&relJob{st: s})
			return fail(both(ErrIndeterminate, err))
		}
	}
}

// compensate releases, in the background, a lock granted to an acquire
// whose caller had already given up.
func (cl *Client) compensate(key string, token uint64) {
	cl.stats.compensations.Add(1)
	j := &relJob{compensation: true, st: relState{key: key, token: token, deadline: time.Now().Add(cl.cfg.releaseWindow)}}
	if !cl.rel.submit(j) {
		cl.log.Warn("ticketing: release queue full; an abandoned grant stays held until its lease ends", "key", key, "token", token)
	}
}

// relJob is one release retried in the background.
type relJob struct {
	st           relState
	compensation bool
	next         time.Time // when to try again (when call is nil)
	call         *call     // the attempt in flight
	done         bool
}

// releaser retries releases in the background. Its goroutine (run) owns
// the jobs; others hand it jobs and completed calls under mu.
type releaser struct {
	cl       *Client
	mu       sync.Mutex
	count    int       // live jobs, bounded by releaseQueueLen
	incoming []*relJob // submitted, not yet seen by run
	done     []*call   // attempts answered or lost
	wake     chan struct{}
}

func (r *releaser) init(cl *Client) {
	r.cl = cl
	r.wake = make(chan struct{}, 1)
}

func (r *releaser) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// submit queues a job; false when the queue is full or the client closed.
func (r *releaser) submit(j *relJob) bool {
	r.mu.Lock()
	if r.count >= releaseQueueLen || r.cl.closed.Load() {
		r.mu.Unlock()
		return false
	}
	r.count++
	r.incoming = append(r.incoming, j)
	r.mu.Unlock()
	r.poke()
	return true
}

// adopt hands an attempt in flight, whose caller stops waiting, to the
// releaser. False when the call was already answered (the caller takes the
// answer from c.done).
func (r *releaser) adopt(c *call, j *relJob) bool {
	cn := c.cn
	cn.mu.Lock()
	if !c.pending {
		cn.mu.Unlock()
		return false
	}
	r.mu.Lock()
	if r.count >= releaseQueueLen || r.cl.closed.Load() {
		r.mu.Unlock()
		c.owner = ownerDropped // queue full: the lease is the safety net
		cn.mu.Unlock()
		return true
	}
	r.count++
	j.call = c
	c.job = j
	c.owner = ownerReleaser
	r.incoming = append(r.incoming, j)
	r.mu.Unlock()
	cn.mu.Unlock()
	r.poke()
	return true
}

func (r *releaser) completed(c *call) {
	r.mu.Lock()
	r.done = append(r.done, c)
	r.mu.Unlock()
	r.poke()
}

func (r *releaser) finish(j *relJob, err error) {
	j.done = true
	r.mu.Lock()
	r.count--
	r.mu.Unlock()
	cl := r.cl
	switch {
	case err == nil && j.compensation:
		cl.log.Info("ticketing: released a grant that arrived after its acquire was cancelled", "key", j.st.key, "token", j.st.token)
	case err != nil:
		cl.log.Warn("ticketing: background release failed", "key", j.st.key, "token", j.st.token, "err", err)
	}
}

func (r *releaser) run() {
	cl := r.cl
	defer cl.wg.Done()
	var active []*relJob
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	leader := cl.leader.Load()
	for {
		r.mu.Lock()
		incoming, completed := r.incoming, r.done
		r.incoming, r.done = nil, nil
		r.mu.Unlock()
		active = append(active, incoming...)
		now := time.Now()
		if l := cl.leader.Load(); l != leader {
			leader = l
			if l != nil { // a new leader is known: try the waiting jobs now (once each)
				for _, j := range active {
					if j.call == nil && !j.st.woken {
						j.st.woken = true
						j.next = now
					}
				}
			}
		}
		for _, c := range completed {
			j := c.job
			j.call = nil
			if j.done {
				putCall(c)
				continue
			}
			final, wait, err := j.st.outcome(cl, c)
			putCall(c)
			if final {
				r.finish(j, err)
			} else {
				j.next = now.Add(min(wait, j.st.deadline.Sub(now)-10*time.Millisecond))
			}
		}
		var wakeAt time.Time
		keep := active[:0]
		for _, j := range active {
			if j.done {
				continue
			}
			if !now.Before(j.st.deadline) {
				if c := j.call; c != nil {
					c.cn.mu.Lock()
					if c.pending {
						c.owner = ownerDropped // given up: its answer changes nothing
					}
					c.cn.mu.Unlock()
				}
				r.finish(j, j.st.giveUp(nil))
				continue
			}
			if j.call == nil && !now.Before(j.next) {
				c := getCall()
				j.st.fill(c)
				c.owner = ownerReleaser
				c.job = j
				j.call = c // before enqueue: the answer may come at once
				if cl.tryEnqueue(c) != enqOK {
					j.call = nil
					putCall(c)
					j.next = now.Add(50 * time.Millisecond)
				}
			}
			keep = append(keep, j)
			t := j.st.deadline
			if j.call == nil && j.next.Before(t) {
				t = j.next
			}
			if wakeAt.IsZero() || t.Before(wakeAt) {
				wakeAt = t
			}
		}
		clear(active[len(keep):])
		active = keep
		if !wakeAt.IsZero() {
			timer.Reset(time.Until(wakeAt))
		}
		select {
		case <-r.wake:
		case <-timer.C:
		case <-cl.closing:
			for _, j := range active {
				if !j.done {
					r.finish(j, both(ErrIndeterminate, ErrClosed))
				}
			}
			r.mu.Lock()
			pending := r.incoming
			r.incoming = nil
			r.mu.Unlock()
			for _, j := range pending {
				r.finish(j, both(ErrIndeterminate, ErrClosed))
			}
			return
		}
	}
}
