package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lock is a granted lock: the key, its fencing token and the conservative
// local deadline of its lease. See the package documentation for what
// holding it means.
type Lock struct {
	cl       *Client
	key      string
	keys     []string // a key set (AcquireSet); nil for one key
	token    uint64
	deadline time.Time

	mu       sync.Mutex
	done     chan struct{} // created by the first Done call
	timer    *time.Timer
	released bool
	closed   bool // done is closed
	settled  bool // a Release got a definite answer (O or N): later ones do nothing (R6)
}

// Key is the locked key.
func (l *Lock) Key() string { return l.key }

// Token is the fencing token of this grant (protocol.md §6): strictly
// greater than every token issued before it. Pass it to every resource the
// lock protects; the resource must reject a token lower than the highest it
// has seen, with the check and the write in one transaction.
func (l *Lock) Token() uint64 { return l.token }

// Deadline is the conservative local end of the lease: the local time just
// before the acquire was written, plus the time the server reports the
// acquire waited in the key's queue (the grant's queued field), plus the
// lease. The server's lease cannot end before it (up to the small rate
// difference between clocks; keep a margin). Past it, the lock may belong to
// someone else.
func (l *Lock) Deadline() time.Time { return l.deadline }

// Done returns a channel that is closed at Deadline or when Release is
// called, whichever comes first: the lock must be considered lost then.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if d := time.Until(l.deadline); l.released || d <= 0 {
			l.closeLocked()
		} else {
			l.timer = time.AfterFunc(d, l.expire)
		}
	}
	return l.done
}

func (l *Lock) expire() {
	l.mu.Lock()
	l.closeLocked()
	l.mu.Unlock()
}

func (l *Lock) closeLocked() {
	if l.done != nil && !l.closed {
		l.closed = true
		close(l.done)
	}
	if l.timer != nil {
		l.timer.Stop()
	}
}

// Ending returns a channel closed margin before Deadline, or when Release
// is called, whichever comes first (edge rule R12): the signal to stop
// work that must end while the lock is held. It never panics, also after
// Release (the channel is then closed already). margin ≤ 0 is Done.
func (l *Lock) Ending(margin time.Duration) <-chan struct{} {
	if margin <= 0 {
		return l.Done()
	}
	ch := make(chan struct{})
	done := l.Done()
	go func() {
		t := time.NewTimer(time.Until(l.deadline.Add(-margin)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-done:
		}
		close(ch)
	}()
	return ch
}

// Released reports whether Release was called on this lock.
func (l *Lock) Released() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// Release releases the lock (Client.Release with its key and token). From
// the moment it is called the lock counts as given up (Done is closed), even
// when it returns an error: ErrNotHolder when the lease had already ended,
// ErrIndeterminate when no confirmation came back within 5 s (the lease ends
// it then), ErrClosed when the client was closed (nothing was sent).
//
// Releasing a Lock again after a Release that got the server's answer (nil
// or ErrNotHolder) is a no-op returning nil (edge rule R6; Released says it
// was); after an ErrIndeterminate or ErrClosed one it tries again.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	l.released = true
	l.closeLocked()
	if l.settled {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	var err error
	if l.keys != nil {
		err = l.cl.ReleaseSet(ctx, l.keys, l.token)
	} else {
		err = l.cl.Release(ctx, l.key, l.token)
	}
	if err == nil || errors.Is(err, ErrNotHolder) {
		l.mu.Lock()
		l.settled = true
		l.mu.Unlock()
	}
	return err
}
