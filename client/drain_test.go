package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ticketing/ticketing/client/wire"
)

func goDrain(cl *Client) chan error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ch <- cl.Drain(ctx)
	}()
	return ch
}

func notYet(t *testing.T, ch chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("Drain returned early: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

// Drain waits for a withdrawn acquire and its cancel to be answered.
func TestDrainWaitsForTheWithdrawal(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(cl, ctx, "k", time.Second, time.Minute)
	a := fs.nextOp(t, wire.OpAcquire)
	cancel()
	recv(t, ch)
	c := fs.nextOp(t, wire.OpCancel)
	dr := goDrain(cl)
	notYet(t, dr)
	a.status(wire.StatusTimeout, 0)
	notYet(t, dr)
	c.status(wire.StatusReleased, 0)
	if err := <-dr; err != nil {
		t.Fatal(err)
	}
}

// Drain waits for the compensating release of a grant that won the race.
func TestDrainWaitsForTheCompensation(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr})
	ctx, cancel := context.WithCancel(context.Background())
	ch := goAcquire(cl, ctx, "k", time.Second, time.Minute)
	a := fs.nextOp(t, wire.OpAcquire)
	cancel()
	recv(t, ch)
	c := fs.nextOp(t, wire.OpCancel)
	dr := goDrain(cl)
	a.grant(9, 0)
	c.status(wire.StatusNotHolder, 0)
	r := fs.nextOp(t, wire.OpRelease)
	notYet(t, dr)
	r.status(wire.StatusReleased, 0)
	if err := <-dr; err != nil {
		t.Fatal(err)
	}
}

// Background work that cannot finish ends with the release window, and
// Drain with it; an idle client drains at once; Drain honours ctx.
func TestDrainBounds(t *testing.T) {
	fs := newFake(t, fakeOpts{})
	cl := dial(t, []string{fs.addr}, withReleaseWindow(300*time.Millisecond))
	if err := cl.Drain(context.Background()); err != nil {
		t.Fatalf("idle Drain: %v", err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- cl.Release(rctx, "k", 9) }()
	fs.nextOp(t, wire.OpRelease) // never answered
	rcancel()
	<-errc // handed to the background releaser
	short, scancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer scancel()
	if err := cl.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain = %v, want DeadlineExceeded", err)
	}
	start := time.Now()
	if err := <-goDrain(cl); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Drain took %v; the release window is 300ms", d)
	}
}
